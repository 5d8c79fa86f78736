"""The report's choices between sentences, made once for every language.

Where a report says one thing or another (a clause said or not, one reading or its
alternative), the choice is made here, in Python, from the values the view set; each
language only words the sentences. A language template says where a chosen sentence
goes with ``{{ say("slot") }}`` (``{{ say("slot", x) }}`` hands the sentence ``x``),
and holds each sentence the slot may choose as a macro of that name::

    {% macro over_steps() %} over {{ f.steps_text }} steps{% endmacro %}
    ... ({{ f.op_time }}{{ say("steps") }}; threshold {{ f.threshold }}) ...

``FINDINGS[rule][slot]`` chooses in a finding's template (templates/*/findings/), from
the finding's view ``f`` and the report's values (``on_gpu``); ``REPORT[slot]`` in
report.md.j2 and compare.md.j2, from what the sentence is about (``x``: a section, its
breakdown, a row...), else from the report's values. A choice returns the name of a
sentence (a macro), or None: nothing is said there. A ``Choice`` lists every sentence it
may choose; tests/test_sentences.py holds each language to word every one of them where
it says the slot. ``{{ each("name", items,
", ") }}`` says the sentence ``name`` of each item, joined: a list in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jinja2
from jinja2 import nodes

from ..model.finding import IN_OTHERS, NO_ROOM, NOT_FASTER
from .markup import Md

Values = Any  # the values where the slot is: a jinja2 Context, or what a sentence is about


@dataclass(frozen=True)
class Choice:
    """A slot's choice: the sentences it may choose, and which one, from the values."""

    names: tuple[str, ...]
    pick: Callable[[Values], str | None]


def when(name: str, test: Callable[[Values], Any]) -> Choice:
    """The sentence ``name`` when ``test`` holds, else nothing."""
    return Choice((name,), lambda v: name if test(v) else None)


def either(yes: str, no: str, test: Callable[[Values], Any]) -> Choice:
    """``yes`` when ``test`` holds, else ``no``."""
    return Choice((yes, no), lambda v: yes if test(v) else no)


def first(*cases: tuple[str | None, Callable[[Values], Any]]) -> Choice:
    """The sentence of the first case whose test holds (None: nothing said)."""
    def pick(v: Values) -> str | None:
        return next((name for name, test in cases if test(v)), None)
    return Choice(tuple(n for n, _ in cases if n), pick)


def f(key: str) -> Callable[[Values], Any]:
    """A value of the finding's view (None when it has none)."""
    return lambda v: v["f"].get(key)


def of(path: str) -> Callable[[Any], Any]:
    """A value of what a report sentence is about, by a dotted path ("tf32.override"):
    a view dataclass's field or a dict's key (None when it has none)."""
    def get(x: Any) -> Any:
        for key in path.split("."):
            x = x.get(key) if hasattr(x, "get") else getattr(x, key, None)
        return x
    return get


def no(test: Callable[[Any], Any]) -> Callable[[Any], bool]:
    return lambda x: not test(x)


def kind(name: str) -> Callable[[Values], bool]:
    return lambda v: name in v["f"]["kinds"]


def _always(v: Values) -> bool:
    return True


OVER_STEPS = when("over_steps", lambda v: v["f"]["steps"] > 1)
# zh says "all the recorded steps" where the others say nothing
OVER_STEPS_OR_ALL = either("over_steps", "all_steps", lambda v: v["f"]["steps"] > 1)
ON_GPU = lambda v: v["on_gpu"]  # noqa: E731
LOOP = {"steps": OVER_STEPS, "launch": when("and_a_kernel_launch", ON_GPU),
        "loop_fix": either("unroll_inside_compiled", "compile_the_loop", f("compiled"))}
_CAUSE = lambda v: v["f"]["cause"]  # noqa: E731
_ON_HOST = lambda v: v["f"]["device"] is False  # noqa: E731

# Each finding's choices, by rule id and slot.
FINDINGS: dict[str, dict[str, Choice]] = {
    "communication-bound": {"steps": OVER_STEPS},
    "copy-heavy": {"pageable": when("from_pageable_memory", f("pageable")),
                   "slice_assignment": when("slice_assignment_cause", kind("copyslices")),
                   "transfer": when("transfer_cause", kind("transfer")),
                   "layout_copies": when("layout_copies_cause", kind("layout"))},
    "cpu-side-padding": {"steps": OVER_STEPS},
    "dataloader-bound": {"steps": OVER_STEPS_OR_ALL,
                         "idles": either("the_gpu_idles", "the_model_idles", ON_GPU),
                         "why": either("workers_fall_behind", "main_process_prepares",
                                       f("multiprocess"))},
    "dispatch-bound": LOOP,
    "dominant-operator": {"memory": when("memory_per_call", f("mem_per_call")),
                          # bf16 products on a CPU without bf16 matrix units: BART's
                          # training step took 15 times as long under bf16 autocast
                          "precision": either("lower_precision_timed_first", "lower_precision",
                                              lambda v: not v["on_gpu"] and v["f"]["matrix_op"]),
                          "fuse": when("fuse_with_compile", lambda v: not v["f"]["compiled"]),
                          "compiled": when("compiled_already", f("compiled"))},
    "dropout-cost": {"steps": OVER_STEPS,
                     "mask_backward": when("mask_multiplied_backward", f("mask_backward")),
                     "unfused": when("mask_scaled_and_multiplied", lambda v: not v["f"]["fused"]),
                     "compile": when("compile_fuses_the_mask", lambda v: not v["f"]["compiled"]),
                     "advice": either("call_eval", "weigh_the_rate", f("inference")),
                     "timed_off": when("timed_with_dropout_off", f("timed_off"))},
    "elementwise-blowup": {
        "memory": when("memory_per_call", f("mem_per_call")),
        "materialisers_verb": either("several_make", "one_makes",
                                     lambda v: len(v["f"]["materialisers"]) > 1),
        "together": either("with_the_copies", "without_copies", f("materialisers")),
        "why": either("tensors_blown_up", "memory_bound", f("materialisers")),
        "compile": when("fuse_with_compile", lambda v: not v["f"]["compiled"])},
    "fp32-gemm": {
        "attention": first(("fused_attention_too", lambda v: v["f"]["attention"] and (
                               v["f"]["convolutions"] or v["f"]["products"])),
                           ("memory_efficient_attention", f("attention"))),
        "runs": first(("convolutions_and_products_run",
                       lambda v: v["f"]["convolutions"] and v["f"]["products"]),
                      ("convolutions_run", f("convolutions")), ("products_run", f("products")),
                      ("attention_runs", _always)),
        "arch": when("on_tensor_core_gpu", f("arch")),
        "fp16_attention": when("attention_in_fp16", f("attention")),
        "convolutions_tf32": when("convolutions_in_tf32", f("convolutions")),
        "bf16_attention": when("attention_in_bf16", f("attention")),
        "advice": either("autocast_fp16", "autocast_bf16", f("fp16_only"))},
    "graph-break": {"steps": OVER_STEPS, "pairs": when("break_pairs", f("pairs")),
                    "lookup": when("guard_checks_after", f("lookup"))},
    "launch-overhead": {"steps": OVER_STEPS,
                        "per_launch": either("graph_launch_work", "average_kernel",
                                             f("graphs")),
                        "delays": when("launch_delays", lambda v: "delay_median" in v["f"]),
                        "fix": either("replay_as_cuda_graphs", "compile_the_model",
                                      f("compiled"))},
    "low-device-utilization": {"steps": OVER_STEPS_OR_ALL},
    "memory-pressure": {"largest": when("largest_allocation", f("op"))},
    "near-roofline": {
        "what": either("products_at_roofline", "operator_at_roofline", f("products")),
        "which": either("these_products", "this_operator", f("products")),
        "how": either("with_tf32", "with_autocast", lambda v: v["f"]["faster_dtype"] == "tf32"),
        "lever": either("lower_precision", "no_faster_dtype", f("faster_dtype")),
        "also": when("also", f("faster_dtype"))},
    "per-sample-loop": {**LOOP, "faults_added": when("less_faults_added", f("faults_added"))},
    "recompilation": {"steps": OVER_STEPS, "ids": when("compile_ids", f("compile_ids"))},
    # the model's own attention switched to SDPA for the timing (whatif.attention_step)
    "unfused-attention": {"advice": first(("sdpa_in_transformers", f("sdpa_transformers")),
                                          ("mha_without_weights", f("sdpa_need_weights")),
                                          ("call_sdpa", _always)),
                          "mha_too": when("and_mha_without_weights",
                                          lambda v: v["f"].get("sdpa_transformers")
                                          and v["f"].get("sdpa_need_weights"))},
    "single-tensor-optimizer": {"steps": OVER_STEPS,
                                "foreach": first(("foreach_no_faster", f("foreach_slower")),
                                                 ("or_foreach", f("fused")))},
    "slow-copies": {
        "direction": either("host_to_device", "device_to_host",
                            lambda v: v["f"]["direction"] == "h2d"),
        "mean": when("mean_copy", f("mean_copy")),
        "why": first(("staged_from_pageable", f("pageable")), ("small_copies", f("small"))),
        "advice": first(("pin_memory", f("pageable")), ("fewer_larger_copies", f("small")),
                        ("check_the_link", _always))},
    "sync-stall": {"steps": OVER_STEPS, "item": when("item_calls", f("item_calls"))},
    "straggler-rank": {
        "others": either("the_other_rank", "the_other_ranks", lambda v: v["f"]["ranks"] == 2),
        "others_wait": either("the_other_rank_waits", "the_other_ranks_wait",
                              lambda v: v["f"]["ranks"] == 2),
        "cause": either("host_cause", "device_cause", _ON_HOST),
        "advice": first(
            ("balance_host_work", lambda v: _ON_HOST(v) and _CAUSE(v) == "compute"),
            ("faster_data_loading", lambda v: _ON_HOST(v) and _CAUSE(v) == "host"),
            ("network_waits", _ON_HOST),
            ("balance_device_work", lambda v: _CAUSE(v) == "compute"),
            ("host_not_launching", lambda v: _CAUSE(v) == "host"),
            ("device_waits", _always))},
}

# The choices of report.md.j2 and compare.md.j2, by slot, from what the sentence is about.
REPORT: dict[str, Choice] = {
    # the run's facts
    "cuda": when("with_cuda", of("cuda")),
    "driver": when("with_driver", of("driver")),
    "batch": when("with_batch", of("batch_size")),
    "threads": when("with_threads", of("threads")),
    "seed": when("reproduces_seed", of("seed")),
    # a busy machine (b: the view's busy statement)
    "busy_time": when("disturbed_share", of("time")),
    "busy_wait": when("threads_waited_for_a_core", of("wait")),
    "busy_unreliable": when("too_few_quiet_windows", of("unreliable")),
    "busy_profile": when("profiled_steps_disturbed", of("profile")),
    "busy_whatif": when("replacements_disturbed", of("whatif")),
    "busy_peaks": when("peaks_disturbed", of("peaks")),
    # a what-if not timed (w: its row): why
    "whatif_why": first(("operands_over_cap", of("need")),
                        ("called_sys_exit", lambda w: of("exit")(w) is not None),
                        ("raised_error", _always)),
    # throughput (s: the section); ru says a range and a single value in other words
    "range_high": when("up_to_max", of("throughput_max")),
    "ci_high": when("up_to_ci_high", of("ci_high")),
    "interval": either("confidence_interval", "range_of_windows", of("ci_low")),
    "spread": either("spread_from_to", "all_windows_gave", of("throughput_max")),
    "ci_bounds": either("ci_from_to", "ci_alone", of("ci_high")),
    "interval_or_spread": first(("confidence_interval", of("ci_low")),
                                ("range_from_to", of("throughput_max")),
                                ("all_windows_gave", _always)),
    "outliers": when("outliers_kept", of("outliers")),
    "disturbed": when("disturbed_left_out", of("disturbed_windows")),
    # the summary's other lines
    "tf32_forced": when("forced_by_environment", of("tf32.override")),
    "of_capacity": when("of_capacity", of("device_memory")),
    "kernels_advice": either("run_larger_preset", "give_kernels_more_work",
                             of("larger_preset")),
    "held": when("held_before_this_mode", of("host_held")),
    "mode_held": either("before_the_mode", "before_this_stage", of("mode")),
    "on_the_gpu": when("on_the_gpu", of("on_gpu")),
    # the ranks (r: a rank's row)
    "rank_error": when("with_error", of("error")),
    # the step breakdown (b), its streams, the critical path and the ranks (r: a row)
    "reading": either("gpu_bound_reading", "host_reading", of("gpu_bound")),
    "lead_share": either("unmarked_share_first", "lead_phase_share", of("other_share")),
    "gpu_busy_share": when("gpu_busy_and_idle", of("busy_share")),
    "idle_reason": when("mostly_idle_reason", of("idle_reason")),
    "comm_hidden": when("compute_hides_communication", of("comm_hidden")),
    "pageable_copies": when("pageable_copies_per_step", of("pageable")),
    "stream_device": when("on_device", of("device")),
    "host_ahead": when("host_stays_ahead", no(of("launch.dry"))),
    "path_part": first(("host_phase_on_path", lambda r: of("group")(r) == "host"),
                       ("device_work_on_path", lambda r: of("group")(r) == "device"),
                       ("link_on_path", _always)),
    "ranks_by": either("each_rank_by_gpu", "each_rank_by_host", of("stragglers.device")),
    "ranks_columns": either("gpu_columns", "host_columns", of("stragglers.device")),
    "long_steps_first": when("long_steps_lead", of("loop.first")),
    # torch.compile (k)
    "regions": first(("regions_gpu_share", of("device_share")),
                     ("regions_step_share", of("share"))),
    "guards": when("guard_checks", of("lookups")),
    "step_range": when("compiled_step_range", of("low")),
    "frames": first(("graph_breaks_found", of("breaks")),
                    ("graph_breaks_likely",
                     lambda k: of("frames")(k) > 1 and not of("breaks_known")(k))),
    "region_column": when("region_column", of("by_region")),
    "source_column": when("model_code_column", of("by_source")),
    "model_code_note": when("provenance_note", of("by_source")),
    "recompiled": when("frames_recompiled", of("recompiled")),
    "compile_time": when("compiled_in_window", of("compile_time")),
    "cpp_kernels": when("cpp_kernels_unnamed",
                        lambda k: not of("kernels")(k) and not of("on_gpu")(k)),
    "kernels_share_of": either("of_gpu_time", "of_the_step", of("on_gpu")),
    "kernels_more": when("more_not_shown", of("kernels_more")),
    "unnamed_fusions": when("names_without_operators",
                            lambda k: any(r.get("fused") is None for r in of("kernels")(k))),
    # efficiency (e)
    "flops_counted": either("forward_times_three", "forward_flops", of("training")),
    "which_step": either("the_timed_step", "the_profiled_step", of("step_timed")),
    "backward_too": when("backward_included", of("training")),
    "peaks_source": either("measured_here", "from_reference", of("seconds")),
    "calibration_threads": when("on_threads", of("threads")),
    "sparse": when("sparse_halved", lambda e: "sparse" in of("reference")(e)),
    "raised": when("run_beat_the_peaks", of("raised")),
    "tf32_inferred": when("fp32_ran_as_tf32", of("tf32_inferred")),
    "times_are": either("gpu_times", "cpu_times_with_callees",
                        lambda e: of("basis")(e) == "device"),
    "not_modelled": when("no_formula_for", of("not_modelled")),
    "over_roof": when("above_the_roof", of("over_roof")),
    "no_peak": when("no_peak_for", of("no_peak")),
    # the findings (s: the section; f: a finding's view)
    "problems_heading": either("main_problems", "what_bounds_the_step",
                               lambda s: any(f["rule"] != "near-roofline"
                                             for f in of("findings")(s))),
    "measured": first(("measured_step_in_turn", of("worth.step_less")),
                      ("measured_past_the_step", of("worth.recorded")),
                      ("measured_with_faults", of("worth.faults")),
                      ("measured_before_after", of("worth.before"))),
    # a whole step's timing that lacked the page faults the step took before the profiler
    "step_faults": when("faults_the_timing_missed", of("worth.faults")),
    "worth": either("saving_per_step", "not_quantifiable", of("worth.saving")),
    "band": when("between_low_and_high", of("worth.band")),
    "accounts": when("accounts_for", of("worth.accounts")),
    "accounts_share": when("accounts_share", of("worth.accounts_share")),
    "accounts_beyond": when("less_than_the_step_saved", of("worth.beyond")),
    "unprofiled": when("gpu_idles_at_most", of("worth.unprofiled")),
    "idle_others": when("idle_of_other_problems", of("worth.others")),
    "faults": when("profiler_distorts_the_share", lambda f: "profiled_faults_text" in f),
    "first_touch": when("first_touch_overstates", of("first_touch")),
    "varied": when("timed_twice_apart", of("worth.first")),
    "nothing_main": either("no_fix_worth_the_threshold", "no_rule_fired", of("minor_findings")),
    "minor_worth": first(("not_faster_here", lambda f: of("worth.note")(f) == NOT_FASTER),
                         ("time_in_others", lambda f: of("worth.note")(f) == IN_OTHERS),
                         ("no_room_left", lambda f: of("worth.note")(f) == NO_ROOM),
                         ("minor_saving", lambda f: True)),
    # a comparison (m: a mode compared; f: a finding that went, came or stayed)
    "ratio_high": when("up_to_ratio_high", of("ratio_high")),
    "ratio_bounds": either("ratio_from_to", "ratio_alone", of("ratio_high")),
    "faster_by": either("speedup_interval", "faster_within_noise", of("ratio_low")),
    "slower_by": either("ratio_interval", "slower_within_noise", of("ratio_low")),
    "no_change_by": either("interval_holds_one", "within_the_spread", of("ratio_low")),
    "busy_runs": either("both_runs", "one_run", lambda m: len(of("busy_runs")(m)) > 1),
    "top_operator": when("top_operator", of("op")),
    # the closing line (the report's values)
    "chrome_trace": when("with_chrome_trace", lambda v: v.get("sections")[0].trace),
}


def choose(values: Values, slot: str, template: str | None, about: Any = None) -> str | None:
    """The sentence a slot chooses (a macro's name), or None: in a finding's template from
    the finding (``f``) and the report's values, elsewhere from what the sentence is
    about (the value handed to it: a section, its breakdown, a row...)."""
    if template and template.startswith("findings/"):
        choice = FINDINGS.get(values["f"]["rule"], {}).get(slot)
    else:
        choice = REPORT.get(slot)
        values = values if about is None else about
    if choice is None:
        raise jinja2.UndefinedError(f"no choice named {slot!r} (reporter.render.sentences)")
    return choice.pick(values)


@jinja2.pass_context
def say(context: jinja2.runtime.Context, slot: str, *args: Any) -> Md:
    """The sentence ``slot`` chooses, worded by the template that says it; nothing when
    it chooses none."""
    key = choose(context, slot, context.name, args[0] if args else None)
    if key is None:
        return Md("")
    sentence = _sentence(context, key)
    if sentence is None:
        raise jinja2.UndefinedError(f"{context.name} has no sentence {key!r} "
                                    f"(a macro of that name, for {slot!r})")
    return Md(sentence(*args))


def _sentence(context: jinja2.runtime.Context, name: str) -> Any:
    """The macro ``name`` of the template being rendered; for a block rendered on its
    own (``template.blocks[...]`` in a test), the template's macros are defined first."""
    found = context.resolve_or_missing(name)
    if found is not jinja2.runtime.missing:
        return found
    env = context.environment
    if not context.name or env.loader is None:
        return None
    tree = env.parse(env.loader.get_source(env, context.name)[0])
    body = [n for n in tree.body if isinstance(n, (nodes.Macro, nodes.Import))]
    template = nodes.Template(body, lineno=1)
    template.set_environment(env)
    module = env.template_class.from_code(env, env.compile(template, context.name),
                                          env.make_globals(None)
                                          ).make_module(dict(context.get_all()))
    return getattr(module, name, None)


@jinja2.pass_context
def each(context: jinja2.runtime.Context, name: str, items: Any, separator: str,
         last: str | None = None) -> Md:
    """The sentence ``name`` said of each item, joined by ``separator`` (a list in words:
    "rank 1, rank 3"); ``last`` joins the last two ("A, B и C")."""
    sentence = _sentence(context, name)
    if sentence is None:
        raise jinja2.UndefinedError(f"{context.name} has no sentence {name!r}")
    said = [sentence(item) for item in items]
    if last is not None and len(said) > 1:
        said[-2:] = [said[-2] + last + said[-1]]
    return Md(separator.join(said))
