"""The report's choices between sentences, made once for every language.

Where a report says one thing or another (a clause said or not, one reading or its
alternative), the choice is made here, in Python, from the values the view set; each
language only words the sentences. A language template says where a chosen sentence
goes with ``{{ say("slot") }}`` (``{{ say("slot", x) }}`` hands the sentence ``x``),
and holds each sentence the slot may choose as a macro of that name::

    {% macro over_steps() %} over {{ f.steps_text }} steps{% endmacro %}
    ... ({{ f.op_time }}{{ say("steps") }}; threshold {{ f.threshold }}) ...

A finding's template (templates/*/findings/) chooses by its rule's choices, declared beside
the rule's detection (``@rule(..., says={slot: Choice})``, reporter.analyze.rules; the
choices themselves, reporter.model.choice), from the finding's view ``f`` and the report's
values (``on_gpu``); ``REPORT[slot]`` in
report.md.j2 and compare.md.j2, from what the sentence is about (``x``: a section, its
breakdown, a row...), else from the report's values. A choice returns the name of a
sentence (a macro), or None: nothing is said there. A ``Choice`` lists every sentence it
may choose; tests/test_sentences.py holds each language to word every one of them where
it says the slot. ``{{ each("name", items,
", ") }}`` says the sentence ``name`` of each item, joined: a list in words.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jinja2
from jinja2 import nodes

from ..analyze.findings import RULES
from ..model.choice import Choice, Values, always, either, first, when
from ..model.finding import IN_OTHERS, NO_ROOM, NOT_FASTER
from .markup import Md


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


def _statement(rule_id: str) -> bool:
    """A statement (near-roofline: the step's shape), not a problem: made from the other
    findings, not detected (reporter.analyze.findings.statement)."""
    rule = RULES.get(rule_id)
    return rule is not None and rule.func is None


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
    # two windows are "both" ("в обоих замерах"), not "all 2"
    "busy_windows": first(("both_windows_disturbed",
                           lambda b: of("all_windows")(b) and of("of")(b) == 2),
                          ("all_windows_disturbed", of("all_windows")),
                          ("some_windows_disturbed", always)),
    "busy_unreliable": when("too_few_quiet_windows", of("unreliable")),
    "busy_profile": when("profiled_steps_disturbed", of("profile")),
    "busy_whatif": when("replacements_disturbed", of("whatif")),
    "busy_peaks": when("peaks_disturbed", of("peaks")),
    # the replacements and the peaks disturbed both: one sentence, not two alike (ru, R13)
    "busy_whatif_peaks": first(("replacements_and_peaks_disturbed",
                                lambda b: of("whatif")(b) and of("peaks")(b)),
                               ("replacements_disturbed", of("whatif")),
                               ("peaks_disturbed", of("peaks"))),
    # a what-if not timed (w: its row): why
    "whatif_estimate": either("estimate_from_profile", "no_estimate", of("estimated")),
    "whatif_why": first(("operands_over_cap", of("need")),
                        ("called_sys_exit", lambda w: of("exit")(w) is not None),
                        ("raised_error", always)),
    # throughput (s: the section); ru says a range and a single value in other words
    "range_high": when("up_to_max", of("throughput_max")),
    "ci_high": when("up_to_ci_high", of("ci_high")),
    "interval": either("confidence_interval", "range_of_windows", of("ci_low")),
    "spread": either("spread_from_to", "all_windows_gave", of("throughput_max")),
    "ci_bounds": either("ci_from_to", "ci_alone", of("ci_high")),
    "interval_or_spread": first(("confidence_interval", of("ci_low")),
                                ("range_from_to", of("throughput_max")),
                                ("all_windows_gave", always)),
    "outliers": when("outliers_kept", of("outliers")),
    # an unreliable throughput's disturbed windows: all of them, or how many (R9)
    # an unreliable throughput's windows: all disturbed ("all of them", not "3 of them"
    # of 3), or some (review 2026-12 R9, Z5)
    "unreliable_disturbed": either("every_window_disturbed", "windows_disturbed",
                                   lambda s: of("disturbed_windows")(s) >= of("windows")(s)),
    "disturbed": when("disturbed_left_out", of("disturbed_windows")),
    # the summary's other lines
    "tf32_forced": when("forced_by_environment", of("tf32.override")),
    "driven": first(("driven_inference_probed",
                     lambda s: of("driven")(s) == "inference" and of("probe")(s)),
                    ("driven_inference", lambda s: of("driven")(s) == "inference"),
                    ("driven_train", always)),
    # the user's own forward, run once as its code runs it (s: the section)
    "probe": either("probe_built_graph", "probe_built_nothing",
                    lambda s: of("probe")(s) == "graph"),
    "in_training": when("modules_were_in_training", of("training_modules")),
    "of_capacity": when("of_capacity", of("device_memory")),
    "kernels_advice": either("run_larger_preset", "give_kernels_more_work",
                             of("larger_preset")),
    "held": when("held_before_this_mode", of("host_held")),
    "mode_held": either("before_the_mode", "before_this_stage", of("mode")),
    "on_the_gpu": when("on_the_gpu", of("on_gpu")),
    # a peak of which the memory profile categorised nothing is not "uncategorised 4 MB"
    "tensor_split": either("none_categorised", "categories_listed",
                           lambda s: [c["name"] for c in of("tensor_categories")(s)]
                           == ["unknown"]),
    # the ranks (r: a rank's row)
    "rank_error": when("with_error", of("error")),
    # the step breakdown (b), its streams, the critical path and the ranks (r: a row)
    "reading": either("gpu_bound_reading", "host_reading", of("gpu_bound")),
    # the GPU-bound reading's largest phase: "of the marked phases" where unmarked time
    # is larger (review C-A)
    "gpu_bound_lead": either("most_of_marked_phases", "most_of_host_phases", of("other_share")),
    "lead_share": either("unmarked_share_first", "lead_phase_share", of("other_share")),
    "gpu_busy_share": when("gpu_busy_and_idle", of("busy_share")),
    "idle_reason": when("mostly_idle_reason", of("idle_reason")),
    "comm_hidden": when("compute_hides_communication", of("comm_hidden")),
    # device -> host copies into pageable memory are not "from" it (review C-B)
    "pageable_copies": first(("pageable_copies_per_step",
                              lambda b: of("pageable")(b) and of("pageable_from_host")(b)),
                             ("pageable_involved_per_step", of("pageable"))),
    "stream_device": when("on_device", of("device")),
    "host_ahead": when("host_stays_ahead", no(of("launch.dry"))),
    # the steps the GPU ran out of queued work in: "in every step", not "in 4 of 4 steps"
    "dry_steps": first(("dry_in_no_step", lambda b: not of("launch.dry")(b)),
                       # one step recorded: not "in all 1 step"
                       ("dry_in_the_step", lambda b: of("launch.steps")(b) == 1),
                       # two steps: "in both steps" ("во всех 2 шагах" is not Russian)
                       ("dry_in_both_steps",
                        lambda b: of("launch.all_steps")(b) and of("launch.steps")(b) == 2),
                       ("dry_in_all_steps", of("launch.all_steps")),
                       ("dry_in_some_steps", always)),
    "path_part": first(("host_phase_on_path", lambda r: of("group")(r) == "host"),
                       ("device_work_on_path", lambda r: of("group")(r) == "device"),
                       ("link_on_path", always)),
    # two ranks: the other one's step, not the others' median (review C-E)
    "ranks_reference": either("over_the_other_rank", "over_the_others_median",
                              of("stragglers.other")),
    "ranks_by": either("each_rank_by_gpu", "each_rank_by_host", of("stragglers.device")),
    "ranks_columns": either("gpu_columns", "host_columns", of("stragglers.device")),
    # "Long step:" for one, "Long steps:" for several
    "long_steps_first": first(("long_step_lead",
                               lambda v: of("loop.first")(v) and of("loop.length")(v) == 1),
                              ("long_steps_lead", of("loop.first"))),
    # torch.compile (k)
    "region_parts": when("region_device_parts", of("device_parts")),
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
    # the generated kernels: one or several, and those the table leaves out counted in
    # the total (review R10, R11)
    "kernels_note": first(("one_kernel_generated",
                           lambda k: len(of("kernels")(k)) == 1 and not of("kernels_more")(k)),
                          ("kernels_and_more_generated", of("kernels_more")),
                          ("kernels_generated", always)),
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
    "counts_more": when("ops_not_shown", of("more")),
    # the critical path (b.critical)
    "unprofiled_path": when("profiler_on_the_path", of("unprofiled")),
    # the findings (s: the section; f: a finding's view)
    # "what bounds the step" only over a statement that says so, never over no finding
    "problems_heading": either("main_problems", "what_bounds_the_step",
                               lambda s: not of("findings")(s) or any(
                                   not _statement(f["rule"]) for f in of("findings")(s))),
    "measured": first(("measured_users_step", of("worth.users_step")),
                      ("measured_step_in_turn", of("worth.step_less")),
                      ("measured_past_the_step", of("worth.recorded")),
                      ("measured_with_faults", of("worth.faults")),
                      ("measured_before_after", of("worth.before"))),
    # a whole step's timing that lacked the page faults the step took before the profiler
    "step_faults": when("faults_the_timing_missed", of("worth.faults")),
    "worth": first(("saving_up_to", lambda f: of("worth.saving")(f) and of("worth.at_top")(f)),
                   ("saving_per_step", of("worth.saving")),
                   ("up_to_the_peaks", of("worth.peaks")),
                   # a growing operator's loop: the module's own code bounds it
                   ("up_to_its_loop", lambda f: of("worth.upper")(f) and of("loop")(f)),
                   ("up_to_its_time", of("worth.upper")),
                   ("not_quantifiable", always)),
    "band": when("between_low_and_high", of("worth.band")),
    "floor": when("at_least_low", of("worth.floor")),
    # the bound is all of the operators' time: said once, not "up to 877 us ... they
    # take 877 us" (review C-D)
    "accounts": first(("all_their_unprofiled_time",
                       lambda f: of("worth.all_of_it")(f) and of("worth.accounts_unprofiled")(f)),
                      ("all_their_time", of("worth.all_of_it")),
                      ("accounts_for_unprofiled_step",
                       lambda f: of("worth.accounts")(f) and of("worth.accounts_unprofiled")(f)),
                      ("accounts_for", of("worth.accounts"))),
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
    # every section's trace (a run of both modes has two), not the first one's alone
    "chrome_trace": first(("with_chrome_traces", lambda v: len(v.get("traces") or []) > 1),
                          ("with_chrome_trace", lambda v: v.get("sections")[0].trace)),
}


def finding_choices(rule_id: str) -> Mapping[str, Choice]:
    """A rule's choices, by slot: declared beside its detection (``@rule(..., says=...)``,
    reporter.analyze.rules)."""
    rule = RULES.get(rule_id)
    return rule.says if rule is not None else {}


def choose(values: Values, slot: str, template: str | None, about: Any = None) -> str | None:
    """The sentence a slot chooses (a macro's name), or None: in a finding's template from
    the finding (``f``) and the report's values, elsewhere from what the sentence is
    about (the value handed to it: a section, its breakdown, a row...)."""
    if template and template.startswith("findings/"):
        choice = finding_choices(values["f"]["rule"]).get(slot)
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
