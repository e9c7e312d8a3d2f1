"""Training of the eagle drafter on a self-distillation cache (target frozen), as EAGLE trains its head.

For every sample the draft layer sees the whole sequence at once (causal). At position t it reads the
target's feature f_t plus uniform noise, fused with the embedding of x_{t+1}, and predicts f_{t+1}. The
loss, on response positions only (those whose x_{t+1} the target generated), has two terms:

    feature_weight * SmoothL1(f^_{t+1}, f_{t+1}) + token_weight * CE(softmax(lm_head f_{t+1}), lm_head f^_{t+1})

The first is averaged over the hidden size. The second is the soft cross-entropy against the target's
own next-token distribution. EAGLE weights them 1 and 0.1. Both use the target's frozen ``lm_head``, cut
to the training vocabulary when ``train_vocab`` is set.

The loop is the one every method shares (`common.train_loop`, with `common.CurveBatches`, which measures the
learning curve). The recipe's held-out metrics are the losses and the teacher-forced depth-1 top-1/top-5 accuracy (the predicted
feature's best tokens against x_{t+2}). `specbench replay` gives acceptance by tree budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from specbench.drafters.draft_vocab import RANKING_KEY, DraftVocab
from specbench.drafters.eagle import EagleModule
from specbench.drafters.training.common import (
    CurveBatches,
    SampleTrainConfig,
    at_least,
    autocast,
    chain_scores,
    load_warm_start,
    sample_training_data,
    train_loop,
    write_trained,
)
from specbench.drafters.training.distill import Sample
from specbench.errors import SpecbenchError
from specbench.model import TargetModel


@dataclass(kw_only=True)
class EagleTrainConfig(SampleTrainConfig):
    """How to train an eagle drafter: `SampleTrainConfig`'s fields and the draft layer's own."""

    method: str = "eagle"
    feature_weight: float = 1.0
    token_weight: float = 0.1
    noise: float = 0.1  # uniform noise U(-noise, noise) on the input features (EAGLE's paper: 0.1)
    inner: int | None = None  # the layer's MLP width (default 2H)
    unroll: int = 1  # chain levels trained per anchor (> 1: EAGLE-3's training-time test, own features fed back)

    def validate(self) -> None:
        if self.method != "eagle":
            raise SpecbenchError(f"EagleTrainConfig trains eagle, not {self.method!r}")
        super().validate()
        at_least(self, 1, "unroll")
        at_least(self, 1, "inner", optional=True)
        at_least(self, 0, "feature_weight", "token_weight")
        if not self.noise >= 0:
            raise SpecbenchError(f"--noise must be 0 (none) or positive, not {self.noise!r}")


def response_rows(sample: Sample) -> tuple[int, int]:
    """[start, end): positions t whose next token x_{t+1} is a response token."""
    return sample.prompt_len - 1, len(sample.input_ids) - 1


def predict_features(module: EagleModule, target: TargetModel, sample: Sample, noise: float = 0.0,
                     generator: torch.Generator | None = None, levels: int = 1) -> list[torch.Tensor]:
    """Predicted features per chain level, each [L - levels, H]: level j at anchor t predicts f_{t+j}
    (`EagleModule.forward_unrolled`) from the sample's (noised) features and next tokens."""
    dtype = next(module.parameters()).dtype
    features = sample.hidden[: len(sample.input_ids) - levels].to(dtype)  # [L-levels, H]
    if noise:
        features = features + (torch.rand(features.shape, generator=generator, dtype=dtype) * 2 - 1) * noise
    with torch.no_grad():
        next_embeddings = target.handle.embed_tokens(sample.input_ids[1:].to(target.device)).to(dtype)  # [L-1, H]
    return module.forward_unrolled(features.to(target.device), next_embeddings, levels)


def losses(module: EagleModule, target: TargetModel, sample: Sample, vocab: DraftVocab | None, noise: float,
           generator: torch.Generator | None, levels: int = 1
           ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]] | None:
    """(feature loss, token loss, predicted logits per level [R, V']) over the anchors whose x_{t+1} is a
    response token and whose f_{t+levels} exists; both losses are averaged over the levels. None if no rows."""
    start, end = sample.prompt_len - 1, len(sample.input_ids) - levels
    if end <= start:
        return None
    logits_of = vocab.logits if vocab is not None else target.lm_head
    feature_loss, token_loss, level_logits = 0.0, 0.0, []
    for level, predicted in enumerate(predict_features(module, target, sample, noise, generator, levels), start=1):
        predicted = predicted[start:end].float()  # [R, H]
        truth = sample.hidden[start + level : end + level].to(target.device, torch.float32)  # f_{t+level} [R, H]
        feature_loss = feature_loss + nn.functional.smooth_l1_loss(predicted, truth)
        with torch.no_grad():
            teacher = logits_of(truth).float().softmax(dim=-1)  # [R, V']
        logits = logits_of(predicted).float()
        token_loss = token_loss - (teacher * logits.log_softmax(dim=-1)).sum(dim=-1).mean()
        level_logits.append(logits)
    return feature_loss / levels, token_loss / levels, level_logits


@torch.no_grad()
def evaluate(module: EagleModule, target: TargetModel, samples: list[Sample], vocab: DraftVocab) -> dict:
    """Held-out losses and the teacher-forced top-1/top-5 accuracy of the first draft token."""
    module.eval()
    feature, token, top1, top5, rows, labelled = 0.0, 0.0, 0, 0, 0, 0
    for sample in samples:
        out = losses(module, target, sample, vocab, 0.0, None)
        if out is None:
            continue
        start, end = response_rows(sample)
        feature_loss, token_loss, (logits,) = out
        labels = sample.input_ids[start + 2 : end + 2].to(logits.device)  # x_{t+2}; the last row has none
        ranked = vocab.token_ids(logits[: len(labels)].topk(5, dim=-1).indices)  # [R', 5]
        top1 += int((ranked[:, 0] == labels).sum())
        top5 += int((ranked == labels[:, None]).any(dim=1).sum())
        labelled += len(labels)
        count = end - start
        feature += feature_loss.item() * count
        token += token_loss.item() * count
        rows += count
    return {"heldout_feature_loss": feature / max(1, rows), "heldout_token_loss": token / max(1, rows),
            "heldout_top1": top1 / max(1, labelled), "heldout_top5": top5 / max(1, labelled), "heldout_rows": rows}


@torch.no_grad()
def chain_accuracy(module: EagleModule, target: TargetModel, samples: list[Sample], vocab: DraftVocab,
                   levels: int = 5) -> dict:
    """Held-out acceptance of the greedy draft chain by depth (`chain_scores`), as the dynamic tree meets it on
    the true path: at depth d the draft reads its own predicted features and the true tokens (`forward_unrolled`)."""

    def drafted(sample: Sample, start: int, end: int) -> list[torch.Tensor]:
        outs = predict_features(module, target, sample, levels=levels)  # levels x [L-levels, H]
        return [vocab.token_ids(vocab.logits(out[start:end]).argmax(dim=-1)) for out in outs]  # levels x [R]

    return chain_scores(module, samples, levels, drafted)


def train_eagle(config: EagleTrainConfig, target: TargetModel, progress: bool = True) -> dict:
    """Train on `train_loop` (each epoch checkpointed, a rerun resumes after the newest), score the held-out
    split, write the checkpoint, its recipe and the learning curve (``metrics.curve`` and ``<out>.curve.json``:
    the held-out chain accuracy before training, at each checkpoint and each epoch's end, by tokens seen)."""
    config.validate()
    loaded, provenance = ({}, None)
    if config.init_from:
        loaded, _, provenance = load_warm_start(Path(config.init_from), "eagle", target, "heldout_chain_tau")
    manifest, ranking, vocab, eval_vocab, train, heldout = sample_training_data(
        config, target, loaded.pop(RANKING_KEY, None))  # a warm start keeps its ranking, so its train vocabulary
    heads = target.config.num_attention_heads
    module = EagleModule(target.config.hidden_size, heads, config.inner).to(target.device)
    if loaded:
        try:
            module.load_state_dict(loaded)
        except RuntimeError as error:
            raise SpecbenchError(f"--init-from {config.init_from}: its layer does not match this one "
                                 f"({str(error).splitlines()[-1].strip()})") from None

    def sample_loss(sample: Sample, generator: torch.Generator) -> torch.Tensor | None:
        out = losses(module, target, sample, vocab, config.noise, generator, config.unroll)
        return None if out is None else config.feature_weight * out[0] + config.token_weight * out[1]

    def measure() -> dict:
        return chain_accuracy(module, target, heldout, eval_vocab)

    tokens_before = provenance["tokens_seen"] if provenance else 0
    start_point = {"epoch": 0, "tokens_seen": tokens_before} | measure()
    data = CurveBatches(train, config.samples_per_step, config.seed, sample_loss, measure, tokens_before)
    history, seconds = train_loop(module, data, target, config, progress)
    with autocast(target.device, config.dtype):
        metrics = evaluate(module, target, heldout, eval_vocab) | chain_accuracy(module, target, heldout, eval_vocab)
    metrics["heldout_vocab"] = eval_vocab.size
    metrics["curve"] = data.write_curve(Path(config.out), start_point, history, len(heldout),
                                        "held-out greedy chain accuracy along the target's own responses (chain_accuracy)")
    extra = {"initialised_from": provenance} if provenance else {}
    return write_trained(Path(config.out), module, ranking, target, config, manifest,
                         {"train_samples": len(train), "heldout_samples": len(heldout)}, metrics, history, seconds,
                         num_heads=heads, **extra)
