"""Advice timed on the device: the replacement a finding proposes, at the recorded shapes.

When the runner has the device at hand and a finding's fix is an operator
replacement, it times the operators as the model ran them and their
replacement at the shapes and dtype the profile recorded, on the same device
(warm-up, synchronised, the median of repeats, a fraction of a second each).
The result, per step, is stored in the run (``Section.whatif``) and the report
says "measured here: X -> Y"; reporter.analyze.savings takes it over its estimate, and
a replacement that is not faster here is not given as a main problem.

Measured now: unfused attention (bmm/matmul + softmax + bmm/matmul) against
``scaled_dot_product_attention``, forward (and backward for a training step), or, where
the model's own attention can be switched to it where it stands (a transformers model
on its eager attention, nn.MultiheadAttention asked for its weights: see
``attention_step``), by the model's own step with and without that switch;
a per-parameter optimizer step against the same optimizer with ``foreach=True`` and
``fused=True`` (where it has one), on copies of the model's parameters and gradients;
fp32 matrix products (mm, addmm, bmm, baddbmm) against the same products in bf16
and in TF32, at the shapes that hold most of their time, the speed-up applied to
their recorded time (the casts that autocast adds are not counted: for weights it
caches them within a step); a blown-up pairwise product (repeat, then mul and sum over the last
dimension) against the matrix product that computes it, likewise; and dropout, by the
model's own step with every dropout at p=0 taken in turn with the step as it is (the fix
applied to the model, not to operators at recorded shapes: see ``dropout_off``).

Each rule names its recipe where it is registered (reporter.analyze.findings.WhatIf);
``RECIPES`` holds them by name, and ``timeable`` says which findings have one.

The package, by recipe family: timing (the timing loop and the operands' cap), steps (the
model's own step with a fix, kept_state, dropout), sdpa (attention), optimizer, products
(fp32 and blown-up matrix products), precision (float32 and the lever), modes (anomaly
detection, inference), convolutions, and recipes (RECIPES, timeable, measure). Their names
are imported from here; a test that replaces one replaces it in the module that reads it
(``whatif.recipes.RULES``, ``whatif.products._medians_s``)."""

from __future__ import annotations

from .timing import (
    BUDGET_S as BUDGET_S,
    GPU_SAMPLE_S as GPU_SAMPLE_S,
    _median_s as _median_s,
    _medians_s as _medians_s,
    Skipped as Skipped,
    _autocast as _autocast,
    OWN_TENSORS_TIMES as OWN_TENSORS_TIMES,
    MIN_CAP_B as MIN_CAP_B,
    own_tensors_b as own_tensors_b,
    MAX_OPERANDS_B as MAX_OPERANDS_B,
)
from .steps import (
    STEP_LEAD as STEP_LEAD,
    STEP_ROUNDS as STEP_ROUNDS,
    STEP_BUDGET_S as STEP_BUDGET_S,
    STEP_ROUNDS_MAX as STEP_ROUNDS_MAX,
    STEP_ROUNDS_LEAST as STEP_ROUNDS_LEAST,
    STEP_WHATIF_S as STEP_WHATIF_S,
    steps_in_turn as steps_in_turn,
    F_DROPOUTS as F_DROPOUTS,
    TORCH_DROPOUTS as TORCH_DROPOUTS,
    dropout_off as dropout_off,
    target_fix as target_fix,
    fixed_step as fixed_step,
    dropout_step as dropout_step,
    kept_state as kept_state,
)
from .sdpa import (
    SOFTMAX as SOFTMAX,
    PRODUCTS as PRODUCTS,
    attention_shapes as attention_shapes,
    attention as attention,
    SWITCHES as SWITCHES,
    attention_switch as attention_switch,
    _sdpa_counted as _sdpa_counted,
    attention_step as attention_step,
)
from .optimizer import (
    MAX_COPY_B as MAX_COPY_B,
    optimizer_foreach as optimizer_foreach,
)
from .products import (
    GEMMS as GEMMS,
    GEMM_COVER as GEMM_COVER,
    GEMM_SHAPES as GEMM_SHAPES,
    GEMM_BUDGET_S as GEMM_BUDGET_S,
    _gemm_time_us as _gemm_time_us,
    reduced_rows as reduced_rows,
    gemm_shapes as gemm_shapes,
    gemm_precision as gemm_precision,
    BLOWUP_SHAPES as BLOWUP_SHAPES,
    _operand_like as _operand_like,
    _recorded_us as _recorded_us,
    blowup_matmul as blowup_matmul,
    _pairwise as _pairwise,
    CONV_SHARE_MEASURED as CONV_SHARE_MEASURED,
)
from .modes import (
    anomaly_off as anomaly_off,
    anomaly_step as anomaly_step,
    inference_step as inference_step,
)
from .precision import (
    tensors_mapped as tensors_mapped,
    single_precision as single_precision,
    single_step as single_step,
    lower_precision as lower_precision,
    lever_dtype as lever_dtype,
    lever_step as lever_step,
)
from .convolutions import (
    conv_bias_pairs as conv_bias_pairs,
    conv_bias_off as conv_bias_off,
    conv_bias_step as conv_bias_step,
    BENCHMARK_WARMUP as BENCHMARK_WARMUP,
    cudnn_benchmark_on as cudnn_benchmark_on,
    cudnn_benchmark_step as cudnn_benchmark_step,
    channels_last_on as channels_last_on,
    channels_last_step as channels_last_step,
)
from .recipes import (
    Recorded as Recorded,
    Recipe as Recipe,
    RECIPES as RECIPES,
    timeable as timeable,
    failure as failure,
    failure_text as failure_text,
    timed_twice as timed_twice,
    measure as measure,
)
