"""Training code shared by the trained drafters: ShareGPT prompts, self-distillation data, caches, and the
trainers of medusa and hydra (`heads`), ctc and ctc-ce (`ctc`), eagle (`eagle`) and eagle3 (`eagle3`), which all run the one
loop in `common` (`common.train_loop`).

`config_class` names the training config of each method, and `refuse_others_options` refuses options
another method's config holds: with each config's own `validate`, the checks a front end needs."""

from __future__ import annotations

from dataclasses import fields


def config_classes() -> dict[str, type]:
    """Each trainable method's training config class (a `common.TrainConfig`), in the order to list them."""
    from specbench.drafters.training.ctc import METHODS, CTCTrainConfig
    from specbench.drafters.training.eagle import EagleTrainConfig
    from specbench.drafters.training.eagle3 import Eagle3TrainConfig
    from specbench.drafters.training.heads import MODULES, HeadTrainConfig

    heads, ctc = dict.fromkeys(MODULES, HeadTrainConfig), dict.fromkeys(METHODS, CTCTrainConfig)
    return heads | ctc | {"eagle": EagleTrainConfig, "eagle3": Eagle3TrainConfig}


def config_class(method: str) -> type:
    """The training config class of ``method``; a one-line `SpecbenchError` naming the methods for another."""
    from specbench.errors import SpecbenchError

    classes = config_classes()
    if method not in classes:
        raise SpecbenchError(f"unknown method {method!r} for train; choose one of {', '.join(classes)}")
    return classes[method]


def refuse_others_options(method: str, **options: object) -> None:
    """Refuse each of ``options`` (config field names) that is set (neither None nor False) while
    ``method``'s config has no such field, so an option meant for another method is not silently ignored:
    "--freeze-loaded is a medusa and hydra option, not ctc's". Also refuses an unknown ``method``."""
    from specbench.drafters.training.common import flag
    from specbench.errors import SpecbenchError

    own = {f.name for f in fields(config_class(method))}
    for name, value in options.items():
        if value is None or value is False or name in own:
            continue
        owners = [other for other, cls in config_classes().items() if name in {f.name for f in fields(cls)}]
        if not owners:
            raise SpecbenchError(f"{flag(name)} is no method's training option")
        listed = ", ".join(owners[:-1]) + " and " + owners[-1] if len(owners) > 1 else owners[0]
        article = "an" if listed[0] in "aeiou" else "a"
        raise SpecbenchError(f"{flag(name)} is {article} {listed} option, not {method}'s")
