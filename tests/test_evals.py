"""Evals as a library: evaluators, the trajectory, the judge, datasets and their errors, and
runs in this process (the CLI's are in test_evals_cli.py, the statistics in
test_evals_stats.py). Scripted models only."""

import json

import pytest
from pydantic import BaseModel

import jsonagent.evals
from jsonagent import Agent, core_tools, tool
from jsonagent.errors import EvalError, RateLimited
from jsonagent.evals import (Call, Case, Contains, Dataset, Equals, Fields, Judge, Number,
                             Outcome, Python, Regex, Schema, SecondsAtMost, Status, StepsAtMost,
                             TokensAtMost, Trajectory, Variant)
from jsonagent.result import RunResult, StepRecord
from jsonagent.state import CallRecord
from jsonagent.testing import ScriptedModel, step
from jsonagent.usage import Usage

CASE = Case(input="What is 2**10?", name="pow")


def outcome(answer="1024", status="completed", calls=(), seconds=1.0, tokens=(90, 10)):
    steps = [StepRecord(index=i + 1, thought="", calls=[CallRecord(tool=t, args=a)])
             for i, (t, a) in enumerate(calls)]
    steps.append(StepRecord(index=len(steps) + 1, thought="", calls=[
        CallRecord(tool="TaskCompleteTool", args={"output": answer})]))
    return Outcome(RunResult(status=status, answer=answer, steps=steps,
                             usage=Usage(prompt_tokens=tokens[0], completion_tokens=tokens[1])),
                   seconds=seconds)


def score(evaluator, out=None):
    return evaluator.evaluate(CASE, out or outcome())


def test_the_public_names_of_evals():
    assert sorted(jsonagent.evals.__all__) == [
        "Call", "Case", "Comparison", "Contains", "Dataset", "Equals", "Evaluator", "Fields",
        "Judge", "Number", "Outcome", "Python", "Regex", "Report", "Run", "Schema", "Score",
        "SecondsAtMost", "Status", "StepsAtMost", "Summary", "TokensAtMost", "Trajectory",
        "Variant", "Verdict", "run", "schema_type"]


# -- the answer ------------------------------------------------------------------------------

def test_equals_trims_and_may_ignore_case():
    assert score(Equals(" 1024\n")).passed
    assert not score(Equals("1024"), outcome("1024.")).passed
    assert not score(Equals("Paris"), outcome("paris")).passed
    assert score(Equals("Paris", ignore_case=True), outcome(" paris ")).passed
    s = score(Equals("1024"), outcome("", status="max_steps"))
    assert not s.passed and s.reason == "no answer: the run ended max_steps"


def test_contains_regex_and_number():
    assert score(Contains("02"), outcome("1024")).passed
    assert not score(Contains("PARIS"), outcome("paris")).passed
    assert score(Contains("PARIS", ignore_case=True), outcome("paris")).passed
    assert score(Contains(["Oslo", "paris"]), outcome("paris, surely")).reason == \
        "found 'paris' in 'paris, surely'"
    assert score(Contains(["Oslo", "Rome"]), outcome("paris")).reason == "no 'Oslo' or 'Rome' in 'paris'"
    assert score(Regex(r"^\d{4}$")).passed and not score(Regex(r"^\d{3}$")).passed
    assert score(Number(3.14, tolerance=0.01), outcome("pi is about 3.1416")).passed
    assert not score(Number(3.14), outcome("pi is about 3.1416")).passed
    assert score(Number(1024), outcome("It is 1,024.")).passed
    assert score(Number(-2.5), outcome(-2.5)).passed


class Part(BaseModel):
    bin: str
    quantity: int


def test_schema_and_typed_answers_field_by_field():
    part = {"bin": "R7-12", "quantity": 318}
    typed = outcome(Part(**part))
    schema = {"type": "object", "required": ["bin"], "properties": {"quantity": {"type": "integer"}}}
    assert score(Schema(schema), typed).passed
    bad = score(Schema(schema), outcome({"quantity": "many"}))
    assert not bad.passed and "'bin' is a required property" in bad.reason
    assert score(Schema({"type": "object"}), outcome('{"a": 1}')).passed  # JSON text is read
    assert score(Fields(part), typed).score == 1.0
    half = score(Fields({"bin": "R7-12", "quantity": 5}), typed)
    assert half.score == 0.5 and not half.passed and "quantity: expected 5, got 318" in half.reason


# -- the run ---------------------------------------------------------------------------------

def test_run_checks_status_steps_seconds_tokens():
    out = outcome(calls=[("add", {"a": 1})], seconds=2.5, tokens=(900, 100))
    assert score(Status(), out).passed and not score(Status("max_steps"), out).passed
    assert score(StepsAtMost(2), out).passed and not score(StepsAtMost(1), out).passed
    assert score(SecondsAtMost(3), out).passed and not score(SecondsAtMost(2), out).passed
    assert score(TokensAtMost(1000), out).passed and not score(TokensAtMost(999), out).passed
    failed = outcome(status="failed")
    failed.result.error = "no valid reply after 3 tries"
    assert score(Status(), failed).reason == "ended failed: no valid reply after 3 tries"


# -- the trajectory --------------------------------------------------------------------------

CALLS = [("search", {"q": "oslo", "n": 3}), ("fetch", {"url": "u"}), ("search", {"q": "bergen"})]


def traj(calls, **options):
    return score(Trajectory(calls, **options), outcome(calls=CALLS))


def test_an_exact_trajectory_scores_one_and_ignores_the_final_call():
    exact = [Call("search", {"q": "oslo", "n": 3}), Call("fetch", {"url": "u"}),
             Call("search", {"q": "bergen"})]
    s = traj(exact, mode="exact", args_match="exact")
    assert (s.score, s.passed) == (1.0, True)
    off = traj(exact[:2], mode="exact")
    assert off.score == pytest.approx(2 / 3) and not off.passed
    assert "call 3 was not expected" in off.reason


def test_trajectory_arguments_exact_partial_or_ignored():
    calls = [{"tool": "search", "args": {"q": "oslo"}}, {"tool": "fetch", "args": {"url": "x"}},
             {"tool": "search", "args": {"q": "bergen"}}]
    assert traj(calls, mode="exact", args_match="ignore").score == 1.0
    partial = traj(calls, mode="exact", args_match="partial")
    assert partial.score == pytest.approx(1 / 3) and "call 2 differs" in partial.reason
    assert traj(calls[:1], mode="in_order", args_match="exact").score == 0.0  # n is missing
    per_call = [Call("search", {"q": "oslo"}), Call("fetch", {"url": "x"}, args_match="ignore")]
    assert traj(per_call, mode="in_order").score == 1.0


def test_trajectory_modes():
    search, fetch = Call("search"), Call("fetch")
    ignore = {"args_match": "ignore"}
    assert traj([search, search], mode="in_order", **ignore).score == 1.0
    assert traj([fetch, search, search], mode="in_order", **ignore).score == pytest.approx(2 / 3)
    assert traj([fetch, search, search], mode="any_order", **ignore).score == 1.0
    assert traj([fetch, search], mode="any_order", **ignore).score == pytest.approx(2 / 3)
    assert traj([search, fetch, search, Call("delete")], mode="subset", **ignore).score == 1.0
    sub = traj([search], mode="subset", **ignore)  # calls count: one search was expected
    assert sub.score == pytest.approx(1 / 3) and "not expected: fetch" in sub.reason
    assert traj([fetch], mode="superset", **ignore).score == 1.0
    sup = traj([fetch, Call("delete")], mode="superset", **ignore)
    assert sup.score == 0.5 and "never made: delete" in sup.reason
    # a loose expected call must not take the only partner of a stricter one
    pairing = traj([Call("search"), Call("search", {"q": "oslo"})], mode="superset")
    assert pairing.score == 1.0


# -- yours and the judge -----------------------------------------------------------------------

def test_python_evaluators_return_a_bool_a_score_or_a_reason():
    assert score(Python(lambda case, result: result.answer == "1024")).passed
    s = score(Python(lambda case, result: (0.25, "a quarter"), threshold=0.2))
    assert (s.score, s.passed, s.reason) == (0.25, True, "a quarter")
    wrong = score(Python(lambda case, result: 7))
    assert wrong.error and not wrong.passed
    boom = score(Python(lambda case, result: 1 / 0))
    assert boom.error == "ZeroDivisionError: division by zero"


def test_a_judge_gives_a_score_and_a_reason_through_its_own_validated_run():
    judge = ScriptedModel([step("TaskCompleteTool", {"score": 0.8, "reason": "right and polite"})])
    s = score(Judge("Is it right?", model=judge))
    assert (s.score, s.passed, s.reason, s.error) == (0.8, True, "right and polite", None)
    prompt = judge.requests[0]["messages"][-1]["content"]
    assert "Is it right?" in prompt and "What is 2**10?" in prompt and "1024" in prompt


def test_a_judge_is_not_asked_about_a_run_without_an_answer():
    judge = ScriptedModel([])
    s = score(Judge("Is it right?", model=judge), outcome(status="max_steps"))
    assert (s.score, s.passed, s.error) == (0.0, False, None) and not judge.requests


def test_a_judge_reply_out_of_range_is_reasked_then_taken():
    judge = ScriptedModel([step("TaskCompleteTool", {"score": 7, "reason": "great"}),
                           step("TaskCompleteTool", {"score": 0.3, "reason": "meh"})])
    s = score(Judge("Is it right?", model=judge))
    assert (s.score, s.passed, s.error) == (0.3, False, None)
    assert len(judge.requests) == 2


def test_a_judge_that_never_validates_is_an_error_never_a_pass():
    judge = ScriptedModel(["a great answer, 10/10"] * 3 + [
        step("TaskCompleteTool", {"score": "yes"})] * 3)
    s = score(Judge("Is it right?", model=judge))
    assert s.error and "no valid verdict" in s.error and not s.passed and s.score == 0.0


# -- datasets --------------------------------------------------------------------------------

def write(tmp_path, text, name="cases.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_dataset_with_defaults_shared_evaluators_and_variants(tmp_path):
    (tmp_path / "eval_checks.py").write_text("def short(case, result):\n    return len(result.answer) < 9\n")
    path = write(tmp_path, """
defaults: {max_steps: 4, tools: [specs.json]}
evaluators: [{status: completed}]
variants:
  - {name: a, model: "scripted:a.json", temperature: 0.5}
  - {name: b, prompt_style: react, max_reasks: 1}
cases:
  - input: What is 2**10?
    expected: "1024"
    tags: [math]
    evaluators:
      - {python: "eval_checks:short"}
      - {trajectory: [run_python], mode: superset, args_match: ignore}
  - {name: typed, input: "Which bin?", expected: {bin: R7-12}, max_steps: 2,
     output_type: {type: object, properties: {bin: {type: string}}}, approve: {Delete: approve}}
""")
    ds = Dataset.load(path)
    first, typed = ds.cases
    assert first.name == "case-1" and first.max_steps == 4 and typed.max_steps == 2
    assert first.tools == [str(tmp_path / "specs.json")]
    assert [e.label for e in first.checks(ds.evaluators)] == \
        ["status", "expected", "eval_checks:short", "trajectory"]
    assert isinstance(typed.checks()[0], Fields)
    # read against the dataset's folder, as its tools are (issue 58, finding 26)
    assert ds.variants[0] == Variant(name="a", model=f"scripted:{tmp_path.resolve() / 'a.json'}",
                                     temperature=0.5)
    assert ds.variants[1].config == {"prompt_style": "react", "max_reasks": 1}
    assert typed.approver()("Delete", {}) and not typed.approver()("Other", {})
    assert len(ds.hash) == 16 and Dataset.load(path).hash == ds.hash


@pytest.mark.parametrize("text, message", [
    ("cases:\n  - input: hi\n    evaluators:\n      - {equal: hi}\n",
     ":4: cases[0].evaluators[0]: an evaluator is a mapping with one of equals,"),
    ("cases:\n  - input: a\n  - input: b\n    evaluators: [{regex: '(unclosed'}]\n",
     ":4: cases[1].evaluators[0].regex: not a valid regular expression"),
    ("cases:\n  - input: a\n    colour: red\n", ":3: cases[0].colour: unknown field"),
    ("cases:\n  - name: x\n", ":2: cases[0].input: Field required"),
    ("cases:\n  - input: a\n    max_steps: 0\n", ":3: cases[0].max_steps: Input should be"),
    ("cases:\n  - input: a\n    approve: maybe\n", ":3: cases[0].approve: Value error, 'maybe'"),
    ("cases:\n  - {input: a, name: x}\n  - {input: b, name: x}\n",
     ":3: cases[1].name: duplicate name 'x'"),
    ("cases: [{input: a}]\nvariants:\n  - {name: v, colour: red}\n",
     ":3: variants[0].colour: neither a variant field"),
    ("cases: [{input: a}]\nvariants:\n  - {name: v, max_steps: -1}\n",
     ":3: variants[0].max_steps: Input should be greater than or equal to 1"),
    ("cases:\n  - input: a\n    evaluators: [{python: 'nosuchmodule:f'}]\n",
     ":3: cases[0].evaluators[0].python: cannot load nosuchmodule:f"),
    ("cases:\n  - input: a\n    evaluators: [{trajectory: [x], mode: sideways}]\n",
     ":3: cases[0].evaluators[0].mode: 'sideways' is not one of exact"),
    ("cases:\n  - input: a\n    evaluators:\n      - {contains: x, ignorecase: true}\n",
     ":4: cases[0].evaluators[0].ignorecase: unknown option of contains; it takes ignore_case, name"),
    ("cases:\n  - input: a\n    evaluators:\n      - trajectory:\n          - {tool: t, arg: {}}\n",
     ":5: cases[0].evaluators[0].trajectory[0].arg: unknown key of a call"),
    ("cases: [{input: a}\n", ": not valid YAML"),
    ("cases: []\n", ":1: cases: must be a non-empty list"),
    ("case: [{input: a}]\n", ":1: a dataset is a mapping with \"cases\""),
])
def test_a_bad_dataset_names_file_line_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(EvalError) as err:
        Dataset.load(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def billion_laughs(depth: int) -> str:
    """A case whose `expected` is nine of the level below, `depth` levels deep: 9**depth
    copies of "lol" from a few hundred bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{n}: &a{n} [{','.join([f'*a{n - 1}'] * 9)}]" for n in range(1, depth + 1)]
    return "cases:\n  - input: x\n    expected:\n" + "".join(f"      {ln}\n" for ln in lines)


def test_a_yaml_alias_bomb_is_refused_before_anything_expands_it(tmp_path):
    """336 bytes of aliases gave 3.8 MB of results and of the report; 474, a MemoryError.
    These 364 are 4.3 MB as JSON."""
    path = write(tmp_path, billion_laughs(5))
    assert path.stat().st_size == 364
    with pytest.raises(EvalError) as err:
        Dataset.load(path)
    assert str(err.value) == (f"{path}:9: its YAML aliases expand to more than 1,000,000 "
                              "characters past the file's own (an alias bomb?)")
    loop = write(tmp_path, "cases:\n  - input: x\n    expected: &a [1, *a]\n")
    with pytest.raises(EvalError, match=r"cases.yaml:3: a YAML alias inside the value it "
                                        r"names: a loop$"):
        Dataset.load(loop)


def test_aliases_within_the_bound_load_as_written(tmp_path):
    path = write(tmp_path, billion_laughs(3))  # 729 copies
    [case] = Dataset.load(path).cases
    assert len(case.expected["a3"]) == 9 and case.expected["a3"][0][0][0][0] == "lol"


def test_a_bad_jsonl_dataset_names_its_line(tmp_path):
    path = write(tmp_path, '{"input": "a"}\n\n{"input": "b", "tags": "x"}\n', "cases.jsonl")
    with pytest.raises(EvalError, match=r"cases.jsonl:3: cases\[1\].tags: Input should be a valid list"):
        Dataset.load(path)
    write(tmp_path, '{"input": "a"}\n{"input": \n', "cases.jsonl")
    with pytest.raises(EvalError, match=r"cases.jsonl:2: not valid JSON"):
        Dataset.load(path)


# -- runs in this process --------------------------------------------------------------------

def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_dataset_run_scores_every_case_and_repeat_and_resumes(tmp_path):
    built = []

    def factory(case, variant):
        built.append((case.name, variant.name))
        answer = "1024" if variant.name == "good" else "no idea"
        return Agent(model=ScriptedModel([step("add", {"a": 1, "b": 2}),
                                          step("TaskCompleteTool", {"output": answer})]),
                     tools=[add], output_type=case.answer_type(), max_steps=case.max_steps)

    ds = Dataset(cases=[Case(input="2**10?", name="pow", expected="1024", tags=["math"],
                             evaluators=[Trajectory([Call("add", {"a": 1})])]),
                        Case(input="count", name="n", evaluators=[Contains("1024")])])
    out = tmp_path / "results.jsonl"
    variants = [Variant(name="good"), Variant(name="bad")]
    report = ds.run(factory, out, repeat=2, variants=variants)
    assert len(built) == 8 and len(report.runs) == 8
    good, bad = report.summary("good"), report.summary("bad")
    assert (good.passed, good.failed, good.rate, good.pass_at[2]) == (4, 0, 1.0, 1.0)
    assert (bad.passed, bad.failed, bad.rate) == (0, 4, 0.0)
    assert good.scores == {"expected": 1.0, "trajectory": 1.0, "contains": 1.0}
    assert report.by_tag("good") == {"math": (2, 2)} and report.by_tag("bad") == {"math": (0, 2)}
    line = json.loads(out.read_text().splitlines()[0])
    extra = line["extra"]
    assert (line["id"], extra["variant"], extra["case"], extra["repeat"]) == \
        ("good/pow#0", "good", "pow", 0)
    assert extra["version"] == jsonagent.__version__ and extra["dataset"] == ds.hash
    assert extra["model"] == "scripted" and extra["trace"][0] == {
        "step": 1, "thought": "", "tool": "add", "args": {"a": 1, "b": 2}, "observation": 3,
        "error": False}
    again = ds.run(factory, out, repeat=3, variants=variants)  # only the third repeats run
    assert len(built) == 12 and len(again.runs) == 12
    versus = again.compare("good", "bad")  # 2 cases, however many repeats: p = 2/4
    assert (versus.test, versus.p, versus.a_only) == ("permutation", 0.5, ["pow", "n"])


def test_a_model_error_is_an_error_of_the_eval_not_a_failed_case(tmp_path):
    def factory(case, variant):
        replies = [RateLimited("rate limited (429) after 3 retries")] if case.name == "down" \
            else [step("TaskCompleteTool", {"output": "x"})]
        return Agent(model=ScriptedModel(replies), tools=[])

    ds = Dataset(cases=[Case(input="a", name="down"), Case(input="b", name="fine"),
                        Case(input="c", name="wrong", expected="y")])
    report = ds.run(factory, tmp_path / "r.jsonl")
    by_case = {r.case: r for r in report.runs}
    assert by_case["down"].verdict == "error"
    assert by_case["down"].why == "the model failed (rate_limited): rate limited (429) after 3 retries"
    assert (by_case["fine"].verdict, by_case["wrong"].verdict) == ("pass", "fail")
    s = report.summary("default")
    assert (s.passed, s.failed, s.errors, s.rate) == (1, 1, 1, 0.5)


def test_an_evaluator_error_and_a_factory_error_are_errors_too(tmp_path):
    def factory(case, variant):
        if case.name == "unbuildable":
            raise RuntimeError("no such tool file")
        return Agent(model=ScriptedModel([step("TaskCompleteTool", {"output": "x"})]), tools=[])

    ds = Dataset(cases=[Case(input="a", name="unbuildable"),
                        Case(input="b", name="judged", evaluators=[Python(lambda c, r: 1 / 0)])])
    runs = {r.case: r for r in ds.run(factory).runs}
    assert runs["unbuildable"].verdict == "error"
    assert runs["unbuildable"].why == "building the agent failed: RuntimeError: no such tool file"
    assert runs["judged"].verdict == "error" and "ZeroDivisionError" in runs["judged"].why


def test_a_plain_function_is_an_evaluator_and_anything_else_is_refused_as_the_case_is_built():
    """`evaluators=[my_function]` failed when the eval ran, with an AttributeError."""
    def is_short(case, result):
        return len(result.answer) < 5, f"{len(result.answer)} characters"

    def factory(case, variant):
        return Agent(model=ScriptedModel([step("TaskCompleteTool", {"output": "1024"})]),
                     tools=[])

    ds = Dataset(cases=[Case(input="a", name="own", evaluators=[is_short])],
                 evaluators=[lambda case, result: result.status == "completed"])
    run = ds.run(factory).runs[0]
    assert run.verdict == "pass"
    assert {s["name"]: (s["passed"], s["reason"]) for s in run.scores} == {
        "<lambda>": (True, ""), "is_short": (True, "4 characters")}
    with pytest.raises(ValueError, match="Status is a class: an evaluator is an instance"):
        Case(input="a", evaluators=[Status])
    with pytest.raises(ValueError, match="'completed' is not an evaluator: give an Evaluator"):
        Case(input="a", evaluators=["completed"])


def test_results_of_another_dataset_are_refused(tmp_path):
    def factory(case, variant):
        return Agent(model=ScriptedModel([step("TaskCompleteTool", {"output": "x"})]), tools=[])

    out = tmp_path / "r.jsonl"
    Dataset(cases=[Case(input="a")]).run(factory, out)
    with pytest.raises(EvalError, match="holds results of another dataset"):
        Dataset(cases=[Case(input="b")]).run(factory, out)
    # a dataset built in code hashes the same in every process: its functions by name
    again = [Case(input="a", evaluators=[Python(lambda c, r: True)]) for _ in range(2)]
    assert Dataset(cases=[again[0]]).hash == Dataset(cases=[again[1]]).hash


def test_a_case_output_type_from_json_schema_is_enforced(tmp_path):
    schema = {"type": "object", "required": ["bin"], "properties": {"bin": {"type": "string"}}}
    case = Case(input="which bin?", output_type=schema, expected={"bin": "R7-12"})
    model = ScriptedModel([step("TaskCompleteTool", {"shelf": 3}),
                           step("TaskCompleteTool", {"bin": "R7-12"})])
    report = Dataset(cases=[case]).run(
        lambda c, v: Agent(model=model, tools=[], output_type=c.answer_type()))
    run = report.runs[0]
    assert run.verdict == "pass" and run.answer == {"bin": "R7-12"}
    assert len(model.requests) == 2  # the first answer was re-asked: it lacked "bin"


def test_the_docs_example_runs(capsys):
    from test_docs import section_blocks

    block, = section_blocks("docs/tutorials/evaluating.md", "python")
    exec(compile(block, "docs/tutorials/evaluating.md", "exec"), {})
    rate, low, high = capsys.readouterr().out.split()
    assert (rate, high) == ("1.0", "1.0") and low.startswith("0.2065")  # one case, not 3 runs


def test_the_docs_dataset_loads(tmp_path):
    from test_docs import section_blocks

    yaml_block, = section_blocks("docs/tutorials/evaluating.md", "yaml")
    ds = Dataset.load(write(tmp_path, yaml_block))
    assert [c.name for c in ds.cases] == ["pow", "weekday", "part"]
    assert [v.name for v in ds.variants] == ["small", "big"]
    assert [e.label for e in ds.cases[1].checks(ds.evaluators)] == ["status", "contains", "judge"]


def test_the_scripted_person_and_the_approval_policy_of_a_case(tmp_path):
    deleted = []

    def delete(name: str) -> str:
        """Delete a file."""
        deleted.append(name)
        return "deleted"

    def factory(case, variant):
        model = ScriptedModel([step("AskHumanHelpTool", {"question": "Which day?"}),
                               step("AskHumanHelpTool", {"question": "And the year?"}),
                               step("delete", {"name": "a.txt"}),
                               step("TaskCompleteTool", {"output": "ok"})])
        return Agent(model=model, tools=[*core_tools(), tool(delete, confirm=True)],
                     ask_human=case.ask_human(), approve=case.approver())

    ds = Dataset(cases=[Case(input="go", name="told", human=["Monday", "2024"],
                             approve={"delete": "approve"}),
                        Case(input="go", name="refused", human=["Monday", "2024"]),
                        Case(input="go", name="unanswered", human=["Monday"]),
                        Case(input="go", name="shrugged", human=["Monday"], human_after="no idea")])
    runs = {r.case: r for r in ds.run(factory).runs}
    told = runs["told"].trace
    assert [s["observation"] for s in told[:3]] == ["Monday", "2024", "deleted"]
    assert deleted == ["a.txt"]  # refused in the second case
    assert runs["refused"].trace[2]["error"] and runs["refused"].verdict == "pass"
    assert runs["unanswered"].status == "needs_human" and runs["unanswered"].verdict == "fail"
    assert runs["shrugged"].trace[1]["observation"] == "no idea"


def test_each_result_records_the_sampling_the_model_call_sent(tmp_path):
    from jsonagent import ModelReply

    sent = {"temperature": 0.7, "top_p": 0.9}
    reply = ModelReply(text=json.dumps(step("TaskCompleteTool", {"output": "x"})), sampling=sent)
    report = Dataset(cases=[Case(input="a")]).run(
        lambda c, v: Agent(model=ScriptedModel([reply]), tools=[]), tmp_path / "r.jsonl")
    assert report.runs[0].sampling == sent and report.summary("default").sampling == sent
    from jsonagent.evals.html import render

    assert "top_p" in render(report)
