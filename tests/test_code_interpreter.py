"""The code-interpreter tool inside a run, on the real subprocess sandbox."""

import pytest

from jsonagent import Agent, AgentConfig
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "done"})


def code(src):
    return step("CodeInterpreterTool", {"code": src})


def test_variables_persist_between_steps_of_a_run():
    r = Agent(model=ScriptedModel([code("x = 2 ** 100"), code("print(x)"), DONE])).run("2**100?")
    assert r.status == "completed"
    assert r.steps[1].observation["stdout"] == f"{2 ** 100}\n"
    assert r.steps[1].observation["exit_code"] == 0


def test_errors_in_code_are_observations_with_the_traceback():
    r = Agent(model=ScriptedModel([code("1/0"), DONE])).run("x")
    obs = r.steps[0].observation
    assert "ZeroDivisionError" in obs["error"] and not r.steps[0].error


def test_a_cell_indented_as_a_whole_runs():
    src = "\n    def f(n):\n        return n * 21\n    print(f(2))\n"
    r = Agent(model=ScriptedModel([code(src), DONE])).run("x")
    assert r.steps[0].observation["stdout"] == "42\n"


def test_api_keys_never_reach_the_code(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    src = "import os; print(sorted(k for k in os.environ if 'KEY' in k or 'OPENAI' in k))"
    r = Agent(model=ScriptedModel([code(src), DONE]), tools=None).run("x")
    assert r.steps[0].observation["stdout"] == "[]\n"


def test_interrupted_loop_keeps_state():
    script = [code("y = 1"), code("while True: pass"), code("print(y)"), DONE]
    r = Agent(model=ScriptedModel(script), config=AgentConfig(sandbox_timeout=1.0)).run("x")
    assert r.steps[1].observation["timed_out"] is True
    assert r.steps[1].observation["note"].startswith("The code ran past the interpreter's time "
                                                     "limit of 1 s (AgentConfig.sandbox_timeout")
    assert r.steps[2].observation["stdout"] == "1\n"


def test_killed_cell_tells_the_model_that_state_is_lost():
    stubborn = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
    script = [code("y = 1"), code(stubborn), code("print(y)"), DONE]
    r = Agent(model=ScriptedModel(script), config=AgentConfig(sandbox_timeout=1.0)).run("x")
    hung = r.steps[1].observation
    assert hung["timed_out"] is True and "restarted" in hung["note"]
    assert "NameError" in r.steps[2].observation["error"]


def test_chat_session_keeps_the_interpreter_between_questions():
    agent = Agent(model=ScriptedModel([code("total = 40"), DONE, code("print(total + 2)"), DONE]))
    with agent.session() as s:
        s.run("set it")
        r = s.run("use it")
    assert r.steps[0].observation["stdout"] == "42\n"


def test_strict_sandbox_refuses_or_runs_fully_isolated():
    from jsonagent.bundled import sandbox

    with sandbox.Sandbox() as sb:
        complete = not sb.isolation.warnings
    r = Agent(model=ScriptedModel([code("print(1)"), DONE]),
              config=AgentConfig(require_isolation=True)).run("x")
    if complete:
        assert r.status == "completed" and r.steps[0].observation["stdout"] == "1\n"
    else:
        assert r.status == "failed" and "sandbox refused to start" in r.error


def test_a_cell_reads_a_tools_latest_result_by_the_tools_name():
    from jsonagent import tool
    from jsonagent.tools.toolset import core_tools

    totals = iter([1840, 2000])

    @tool
    def order_total(order: str) -> dict:
        """An order's total."""
        return {"total": next(totals), "note": 'it\'s "quoted"'}

    @tool
    def sum(order: str) -> int:  # noqa: A001  (a tool named like a builtin)
        """A builtin's name."""
        return 0

    model = ScriptedModel([
        step("order_total", {"order": "H"}), step("sum", {"order": "H"}),
        code("print(order_total['total'] * 2, order_total['note'], sum([1, 2]))"),
        code("order_total = 5"), step("order_total", {"order": "H"}),
        code("print(order_total)"),  # its own value stays
        code("del order_total"), code("print(order_total['total'])"),  # the latest result
        code("print(totl)"), code("total = order_total['total'] + 1"), DONE])
    r = Agent(model=model, tools=[*core_tools(), order_total, sum]).run("x")
    out = [s.observation for s in r.steps if s.tool == "CodeInterpreterTool"]
    assert out[0]["stdout"] == '3680 it\'s "quoted" 3\n'
    assert out[2]["stdout"] == "5\n" and out[4]["stdout"] == "2000\n"
    # `sum` stays the builtin; order_total, which a cell gave its own value, has no shape
    assert out[5]["note"] == ("totl is not defined. What the tools returned is in variables "
                              "named after them: order_total.")
    assert "note" not in out[0] and "NameError" in out[5]["error"]
    assert out[1].get("note") == ("The code ran and printed nothing. To see order_total, print "
                              "it: print(order_total).")
    assert out[6] == {"note": "The code ran and printed nothing. To see total, print it: "
                              "print(total).", "stdout": "", "exit_code": 0}


def test_the_persons_answers_are_not_bound_to_a_name():
    model = ScriptedModel([step("AskHumanHelpTool", {"question": "a number?"}),
                           code("print(AskHumanHelpTool)"), code("print(first_number)"),
                           code("print(math.pi)"), code("print(is_prime(7))"), DONE])
    r = Agent(model=model, ask_human=lambda q: "12345").run("x")
    assert all("NameError" in r.steps[i].observation["error"] for i in (1, 2, 3))
    # no tool results to point to: the value is the model's to write in
    assert r.steps[2].observation["note"] == (
        "first_number is not defined: a variable holds only what an earlier cell assigned to "
        "it. Write the values you were given into the code itself.")
    # a missing import or function says enough itself
    assert "note" not in r.steps[3].observation and "note" not in r.steps[4].observation


def test_a_failed_cell_is_shown_where_the_results_are_and_what_they_hold():
    from jsonagent import tool
    from jsonagent.tools.toolset import core_tools

    @tool
    def invoice_lines(invoice: str) -> list:
        """An invoice's lines."""
        return [{"item": "ties", "quantity": 2, "unit_price_eur": 3.5},
                {"item": "bolts", "quantity": 10, "unit_price_eur": 0.25}]

    model = ScriptedModel([
        step("invoice_lines", {"invoice": "I-1"}),
        code("print(sum(x['quantity'] for x in lines))"),  # a guessed name
        code("data = json.loads('[{'item': 'ties'}]')"),  # the result copied in, broken
        code("print(invoice_lines['lines'])"),  # read as what it is not
        code("print(1 / 0)"),  # a failure that is not about the results
        code("print(invoice_lines[0]['quantity'])"),
        code('print("a" 1)'),  # a slip that copied nothing
        code("print(math.sqrt(2))"),  # a missing import says enough itself
        code("print(invoice_lines[0]['item'] + 1)"),  # an error not about what it is
        code("invoice_lines = 5\nprint(invoice_lines['lines'])"),  # its own value now
        code("x = (1,\nprint('invoice_lines')"),  # a tool's name is not its result's text
        DONE])
    r = Agent(model=model, tools=[*core_tools(), invoice_lines],
              config=AgentConfig(max_steps=20)).run("x")
    out = [s.observation for s in r.steps if s.tool == "CodeInterpreterTool"]
    held = "invoice_lines (a list of 2 dicts with keys item, quantity, unit_price_eur)"
    assert out[0]["note"] == ("lines is not defined. What the tools returned is in variables "
                              f"named after them: {held}.")
    assert out[1]["note"] == ("What the tools returned is already in variables named after "
                              f"them: {held}. Use those instead of copying the data into the code.")
    assert out[2]["note"] == "invoice_lines is a list of 2 dicts with keys item, quantity, " \
                             "unit_price_eur."
    assert "note" not in out[3] and "ZeroDivisionError" in out[3]["error"]
    assert out[4] == {"stdout": "2\n", "exit_code": 0}
    assert all("note" not in o for o in out[5:8]) and "TypeError" in out[7]["error"]
    assert "note" not in out[8] and "TypeError" in out[8]["error"]
    assert "note" not in out[9] and "SyntaxError" in out[9]["error"]


@pytest.mark.parametrize("value, said", [
    ({"a": 1, "b": [2]}, "a dict with keys a, b"), ({}, "an empty dict"), ([], "an empty list"),
    ([1, 2.5], "a list of 2 numbers"), (["x"], "a list of 1 string"),
    ([1, "x"], "a list of 2 values"), ([{"a": 1}, {"b": 2}], "a list of 2 dicts with keys a, b"),
    ({f"k{i}": i for i in range(10)}, "a dict with keys k0, k1, k2, k3, k4, k5, k6, k7 and 2 more"),
    (None, "null"), (True, "a boolean"), ("s", "a string")])
def test_a_results_shape_in_a_few_words(value, said):
    from jsonagent.tools.bound import shape

    assert shape(value) == said


def test_a_missing_module_is_told_nothing_installs_and_the_nearest_names():
    model = ScriptedModel([code("import mathx\nprint(mathx.pi)"), code("import sympy"),
                           code("import json.tools.nothing"), DONE])
    r = Agent(model=model).run("x")
    assert r.steps[0].observation["note"] == (
        "There is no module mathx here, and nothing can be installed (there is no network). "
        "The standard library's modules nearest that name: math, cmath. Fix the code "
        "with what is installed.")
    assert "nearest" not in r.steps[1].observation["note"]
    assert r.steps[2].observation["note"].startswith("There is no module json.tools here") and "nearest" not in r.steps[2].observation["note"]
