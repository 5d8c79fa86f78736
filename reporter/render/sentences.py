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
choices themselves, reporter.model.choice), from the finding's evidence as its rule's class
and the report's values (``on_gpu``). ``REPORT[slot]`` chooses in report.md.j2 and
compare.md.j2, from what the sentence is about (``x``: a section, its breakdown, a row...),
else from the report's own values; never by a key's name: each kind of value carries the
facts its choices test as a frozen dataclass (reporter.render.choices), computed by its
view builder, and a choice reads them through that kind's typed getter
(``lambda s: section(s).interval``), which mypy checks strictly (pyproject.toml), as a
rule's choices read its evidence (``of(MyRule)(v).compiled``). A choice returns the name of
a sentence (a macro), or None: nothing is said there. A ``Choice`` lists every sentence it
may choose; tests/test_sentences.py holds each language to word every one of them where
it says the slot, tests/test_typed_choices.py every choice to read typed fields. ``{{
each("name", items, ", ") }}`` says the sentence ``name`` of each item, joined: a list in
words.
"""

from __future__ import annotations

from typing import Any, Mapping

import jinja2
from jinja2 import nodes

from ..analyze.findings import RULES
from ..model.choice import Choice, Values, always, either, first, when
from ..model.finding import IN_OTHERS, NO_ROOM, NOT_FASTER
from .choices import (BreakdownChoices, BusyChoices, CompiledChoices, CountsChoices,
                      CriticalChoices, EfficiencyChoices, FindingChoices, LongStepChoices,
                      ModeChoices, PathRowChoices, RankChoices, RunChoices, SectionChoices,
                      StepWork, StreamChoices, WhatifChoices, WorthChoices, carried)
from .markup import Md


# The typed choices each kind of value carries (reporter.render.choices), by what a
# sentence is about: a wrong field fails mypy, a view without them fails the render.
run = carried(RunChoices)  # the report's own values (a slot said of no value)
busy = carried(BusyChoices)  # b: a section's busy-machine statement
whatif = carried(WhatifChoices)  # w: a what-if not timed
section = carried(SectionChoices)  # s: a section
rank = carried(RankChoices)  # r: a rank's row
breakdown = carried(BreakdownChoices)  # b: the step breakdown
stream = carried(StreamChoices)  # r: a stream's row
path_row = carried(PathRowChoices)  # r: a row of the critical path
critical = carried(CriticalChoices)  # b.critical: the critical path
long_step = carried(LongStepChoices)  # l: a long step
compiled = carried(CompiledChoices)  # k: torch.compile
work = carried(StepWork)  # e: the efficiency or, the machine busy, the counts
efficiency = carried(EfficiencyChoices)  # e: the efficiency
counts = carried(CountsChoices)  # e: the counts
finding = carried(FindingChoices)  # f: a finding's view
mode = carried(ModeChoices)  # m: a mode compared


def worth(f: Values) -> WorthChoices:
    """What a finding is worth (f: its view)."""
    return finding(f).worth


def _statement(rule_id: str) -> bool:
    """A statement (near-roofline: the step's shape), not a problem: made from the other
    findings, not detected (reporter.analyze.findings.statement)."""
    rule = RULES.get(rule_id)
    return rule is not None and rule.func is None


# The choices of report.md.j2 and compare.md.j2, by slot, from what the sentence is about.
REPORT: dict[str, Choice] = {
    # the run's facts
    "cuda": when("with_cuda", lambda v: run(v).cuda),
    "driver": when("with_driver", lambda v: run(v).driver),
    "batch": when("with_batch", lambda v: run(v).batch),
    "threads": when("with_threads", lambda v: run(v).threads),
    "seed": when("reproduces_seed", lambda v: run(v).seed),
    # a busy machine (b: the view's busy statement)
    "busy_time": when("disturbed_share", lambda b: busy(b).time),
    "busy_wait": when("threads_waited_for_a_core", lambda b: busy(b).wait),
    # two windows are "both" ("в обоих замерах"), not "all 2"
    "busy_windows": first(("both_windows_disturbed",
                           lambda b: busy(b).all_windows and busy(b).windows == 2),
                          ("all_windows_disturbed", lambda b: busy(b).all_windows),
                          ("some_windows_disturbed", always)),
    "busy_unreliable": when("too_few_quiet_windows", lambda b: busy(b).unreliable),
    "busy_profile": when("profiled_steps_disturbed", lambda b: busy(b).profile),
    "busy_whatif": when("replacements_disturbed", lambda b: busy(b).whatif),
    "busy_peaks": when("peaks_disturbed", lambda b: busy(b).peaks),
    # the replacements and the peaks disturbed both: one sentence, not two alike (ru, R13)
    "busy_whatif_peaks": first(("replacements_and_peaks_disturbed",
                                lambda b: busy(b).whatif and busy(b).peaks),
                               ("replacements_disturbed", lambda b: busy(b).whatif),
                               ("peaks_disturbed", lambda b: busy(b).peaks)),
    # a what-if not timed (w: its row): why
    "whatif_estimate": either("estimate_from_profile", "no_estimate",
                              lambda w: whatif(w).estimated),
    "whatif_why": first(("operands_over_cap", lambda w: whatif(w).over_cap),
                        ("called_sys_exit", lambda w: whatif(w).exited),
                        ("raised_error", always)),
    # throughput (s: the section); ru says a range and a single value in other words
    "range_high": when("up_to_max", lambda s: section(s).ranged),
    "ci_high": when("up_to_ci_high", lambda s: section(s).interval_high),
    "interval": either("confidence_interval", "range_of_windows",
                       lambda s: section(s).interval),
    "spread": either("spread_from_to", "all_windows_gave", lambda s: section(s).ranged),
    "ci_bounds": either("ci_from_to", "ci_alone", lambda s: section(s).interval_high),
    "interval_or_spread": first(("confidence_interval", lambda s: section(s).interval),
                                ("range_from_to", lambda s: section(s).ranged),
                                ("all_windows_gave", always)),
    "outliers": when("outliers_kept", lambda s: section(s).outliers),
    # an unreliable throughput's windows: all disturbed ("all of them", not "3 of them"
    # of 3), or some (review 2026-12 R9, Z5)
    "unreliable_disturbed": either("every_window_disturbed", "windows_disturbed",
                                   lambda s: section(s).disturbed_windows
                                   >= section(s).windows),
    "disturbed": when("disturbed_left_out", lambda s: section(s).disturbed_windows),
    # the summary's other lines
    "tf32_forced": when("forced_by_environment", lambda s: section(s).tf32_forced),
    "driven": first(("driven_inference_probed",
                     lambda s: section(s).driven == "inference"
                     and section(s).probe is not None),
                    ("driven_inference", lambda s: section(s).driven == "inference"),
                    ("driven_train", always)),
    # the user's own forward, run once as its code runs it (s: the section)
    "probe": either("probe_built_graph", "probe_built_nothing",
                    lambda s: section(s).probe == "graph"),
    "in_training": when("modules_were_in_training", lambda s: section(s).training_modules),
    "of_capacity": when("of_capacity", lambda v: run(v).device_memory),
    "kernels_advice": either("run_larger_preset", "give_kernels_more_work",
                             lambda v: run(v).larger_preset),
    "held": when("held_before_this_mode", lambda s: section(s).host_held),
    "mode_held": either("before_the_mode", "before_this_stage",
                        lambda s: section(s).mode is not None),
    "on_the_gpu": when("on_the_gpu", lambda v: run(v).on_gpu),
    # a peak of which the memory profile categorised nothing is not "uncategorised 4 MB"
    "tensor_split": either("none_categorised", "categories_listed",
                           lambda s: section(s).tensor_categories == ("unknown",)),
    # the ranks (r: a rank's row)
    "rank_error": when("with_error", lambda r: rank(r).error),
    # the step breakdown (b), its streams, the critical path and the ranks (r: a row)
    "reading": either("gpu_bound_reading", "host_reading", lambda b: breakdown(b).gpu_bound),
    # the GPU-bound reading's largest phase: "of the marked phases" where unmarked time
    # is larger (review C-A)
    "gpu_bound_lead": either("most_of_marked_phases", "most_of_host_phases",
                             lambda b: breakdown(b).unmarked_first),
    "lead_share": either("unmarked_share_first", "lead_phase_share",
                         lambda b: breakdown(b).unmarked_first),
    "gpu_busy_share": when("gpu_busy_and_idle", lambda b: breakdown(b).idle_known),
    "idle_reason": when("mostly_idle_reason", lambda b: breakdown(b).idle_reason),
    "comm_hidden": when("compute_hides_communication", lambda b: breakdown(b).comm_hidden),
    # device -> host copies into pageable memory are not "from" it (review C-B)
    "pageable_copies": first(("pageable_copies_per_step",
                              lambda b: breakdown(b).pageable
                              and breakdown(b).pageable_from_host),
                             ("pageable_involved_per_step", lambda b: breakdown(b).pageable)),
    "stream_device": when("on_device", lambda r: stream(r).device),
    "host_ahead": when("host_stays_ahead", lambda b: not breakdown(b).dry_steps),
    # the steps the GPU ran out of queued work in: "in every step", not "in 4 of 4 steps"
    "dry_steps": first(("dry_in_no_step", lambda b: not breakdown(b).dry_steps),
                       # one step recorded: not "in all 1 step"
                       ("dry_in_the_step", lambda b: breakdown(b).launch_steps == 1),
                       # two steps: "in both steps" ("во всех 2 шагах" is not Russian)
                       ("dry_in_both_steps",
                        lambda b: breakdown(b).all_steps_dry and breakdown(b).launch_steps == 2),
                       ("dry_in_all_steps", lambda b: breakdown(b).all_steps_dry),
                       ("dry_in_some_steps", always)),
    "path_part": first(("host_phase_on_path", lambda r: path_row(r).group == "host"),
                       ("device_work_on_path", lambda r: path_row(r).group == "device"),
                       ("link_on_path", always)),
    # two ranks: the other one's step, not the others' median (review C-E)
    "ranks_reference": either("over_the_other_rank", "over_the_others_median",
                              lambda b: breakdown(b).two_ranks),
    "ranks_by": either("each_rank_by_gpu", "each_rank_by_host",
                       lambda b: breakdown(b).ranks_on_device),
    "ranks_columns": either("gpu_columns", "host_columns",
                            lambda b: breakdown(b).ranks_on_device),
    # "Long step:" for one, "Long steps:" for several (l: a long step)
    "long_steps_first": first(("long_step_lead",
                               lambda x: long_step(x).first and long_step(x).count == 1),
                              ("long_steps_lead", lambda x: long_step(x).first)),
    # torch.compile (k)
    "region_parts": when("region_device_parts", lambda k: compiled(k).device_parts),
    "regions": first(("regions_gpu_share", lambda k: compiled(k).device_share),
                     ("regions_step_share", lambda k: compiled(k).share)),
    "guards": when("guard_checks", lambda k: compiled(k).lookups),
    "step_range": when("compiled_step_range", lambda k: compiled(k).step_range),
    "frames": first(("graph_breaks_found", lambda k: compiled(k).breaks),
                    ("graph_breaks_likely",
                     lambda k: compiled(k).frames > 1 and not compiled(k).breaks_known)),
    "region_column": when("region_column", lambda k: compiled(k).by_region),
    "source_column": when("model_code_column", lambda k: compiled(k).by_source),
    "model_code_note": when("provenance_note", lambda k: compiled(k).by_source),
    "recompiled": when("frames_recompiled", lambda k: compiled(k).recompiled),
    "compile_time": when("compiled_in_window", lambda k: compiled(k).compile_time),
    "cpp_kernels": when("cpp_kernels_unnamed",
                        lambda k: not compiled(k).kernels and not compiled(k).on_gpu),
    "kernels_share_of": either("of_gpu_time", "of_the_step", lambda k: compiled(k).on_gpu),
    # the generated kernels: one or several, and those the table leaves out counted in
    # the total (review R10, R11)
    "kernels_note": first(("one_kernel_generated",
                           lambda k: compiled(k).kernels == 1 and not compiled(k).kernels_more),
                          ("kernels_and_more_generated", lambda k: compiled(k).kernels_more),
                          ("kernels_generated", always)),
    "unnamed_fusions": when("names_without_operators",
                            lambda k: compiled(k).unnamed_fusions),
    # efficiency (e; the counts, where the machine was busy, say the first two)
    "flops_counted": either("forward_times_three", "forward_flops",
                            lambda e: work(e).training),
    "which_step": either("the_timed_step", "the_profiled_step",
                         lambda e: efficiency(e).step_timed),
    "backward_too": when("backward_included", lambda e: work(e).training),
    "peaks_source": either("measured_here", "from_reference", lambda e: efficiency(e).measured),
    "calibration_threads": when("on_threads", lambda e: efficiency(e).threads),
    "sparse": when("sparse_halved", lambda e: efficiency(e).sparse),
    "raised": when("run_beat_the_peaks", lambda e: efficiency(e).raised),
    "tf32_inferred": when("fp32_ran_as_tf32", lambda e: efficiency(e).tf32_inferred),
    "times_are": either("gpu_times", "cpu_times_with_callees",
                        lambda e: efficiency(e).basis == "device"),
    "not_modelled": when("no_formula_for", lambda e: efficiency(e).not_modelled),
    "over_roof": when("above_the_roof", lambda e: efficiency(e).over_roof),
    "no_peak": when("no_peak_for", lambda e: efficiency(e).no_peak),
    "counts_more": when("ops_not_shown", lambda e: counts(e).more),
    # the critical path (b.critical)
    "unprofiled_path": when("profiler_on_the_path", lambda c: critical(c).unprofiled),
    # the findings (s: the section; f: a finding's view)
    # "what bounds the step" only over a statement that says so, never over no finding
    "problems_heading": either("main_problems", "what_bounds_the_step",
                               lambda s: not section(s).findings or any(
                                   not _statement(rule) for rule in section(s).findings)),
    "measured": first(("measured_users_step", lambda f: worth(f).users_step),
                      ("measured_step_in_turn", lambda f: worth(f).step_less),
                      ("measured_past_the_step", lambda f: worth(f).recorded),
                      ("measured_with_faults", lambda f: worth(f).faults),
                      ("measured_before_after", lambda f: worth(f).before)),
    # a whole step's timing that lacked the page faults the step took before the profiler
    "step_faults": when("faults_the_timing_missed", lambda f: worth(f).faults),
    "worth": first(("saving_up_to", lambda f: worth(f).saving and worth(f).at_top),
                   ("saving_per_step", lambda f: worth(f).saving),
                   ("up_to_the_peaks", lambda f: worth(f).peaks),
                   # a growing operator's loop: the module's own code bounds it
                   ("up_to_its_loop", lambda f: worth(f).upper and finding(f).loop),
                   ("up_to_its_time", lambda f: worth(f).upper),
                   ("not_quantifiable", always)),
    "band": when("between_low_and_high", lambda f: worth(f).band),
    "floor": when("at_least_low", lambda f: worth(f).floor),
    # the bound is all of the operators' time: said once, not "up to 877 us ... they
    # take 877 us" (review C-D)
    "accounts": first(("all_their_unprofiled_time",
                       lambda f: worth(f).all_of_it and worth(f).accounts_unprofiled),
                      ("all_their_time", lambda f: worth(f).all_of_it),
                      ("accounts_for_unprofiled_step",
                       lambda f: worth(f).accounts and worth(f).accounts_unprofiled),
                      ("accounts_for", lambda f: worth(f).accounts)),
    "accounts_share": when("accounts_share", lambda f: worth(f).accounts_share),
    "accounts_beyond": when("less_than_the_step_saved", lambda f: worth(f).beyond),
    "unprofiled": when("gpu_idles_at_most", lambda f: worth(f).unprofiled),
    "idle_others": when("idle_of_other_problems", lambda f: worth(f).others),
    "faults": when("profiler_distorts_the_share", lambda f: finding(f).profiled_faults),
    "first_touch": when("first_touch_overstates", lambda f: finding(f).first_touch),
    "varied": when("timed_twice_apart", lambda f: worth(f).varied),
    "nothing_main": either("no_fix_worth_the_threshold", "no_rule_fired",
                           lambda s: section(s).minor_findings),
    "minor_worth": first(("not_faster_here", lambda f: worth(f).note == NOT_FASTER),
                         ("time_in_others", lambda f: worth(f).note == IN_OTHERS),
                         ("no_room_left", lambda f: worth(f).note == NO_ROOM),
                         ("minor_saving", always)),
    # a comparison (m: a mode compared; f: a finding that went, came or stayed)
    "ratio_high": when("up_to_ratio_high", lambda m: mode(m).ratio_high),
    "ratio_bounds": either("ratio_from_to", "ratio_alone", lambda m: mode(m).ratio_high),
    "faster_by": either("speedup_interval", "faster_within_noise", lambda m: mode(m).ratio_low),
    "slower_by": either("ratio_interval", "slower_within_noise", lambda m: mode(m).ratio_low),
    "no_change_by": either("interval_holds_one", "within_the_spread",
                           lambda m: mode(m).ratio_low),
    "busy_runs": either("both_runs", "one_run", lambda m: mode(m).busy_runs > 1),
    "top_operator": when("top_operator", lambda f: finding(f).op),
    # the closing line (the report's values)
    # every section's trace (a run of both modes has two), not the first one's alone
    "chrome_trace": first(("with_chrome_traces", lambda v: run(v).traces > 1),
                          ("with_chrome_trace", lambda v: run(v).first_trace)),
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
