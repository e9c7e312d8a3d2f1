"""The target's settings a front end offers as choices, without importing torch (the command line parses them
before any model loads): the dtypes, the verify regimes and the compiled regime's backends. `specbench.model`
acts on them; `harness.config` declares the options from them."""

from __future__ import annotations

#: the target's dtypes (torch's names)
DTYPE_NAMES = ("float32", "bfloat16", "float16")
#: how the target's verify forward runs (`TargetModel.use_regime`)
REGIMES = ("eager", "compiled")
#: the compiled regime's torch.compile backends: inductor (fused kernels; on CUDA captured as CUDA graphs, mode
#: "reduce-overhead") or cudagraphs (the eager kernels captured as CUDA graphs: seconds to build, GPU only)
COMPILE_BACKENDS = ("inductor", "cudagraphs")
