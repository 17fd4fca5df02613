"""The grounding check: each number of a final answer is looked for in what the run saw
(grounding.py, numbers.py); one found nowhere gets one nudge, and a confirmation is taken."""

import json

from jsonagent import Agent, AgentConfig, tool
from jsonagent.grounding import nudge
from jsonagent.numbers import in_text
from jsonagent.state import CallRecord, Message, RunState, StepRecord
from jsonagent.testing import ScriptedModel, step

FINAL = "TaskCompleteTool"
TOOLS = ["CodeInterpreterTool", "TaskCompleteTool"]


def state(question: str, *observations: tuple) -> RunState:
    """A run that asked `question` and saw these (tool, response[, args]) observations."""
    messages = [Message(role="system", content="You may call at most 50 tools."),
                Message(role="user", content=question)]
    for name, response, *args in observations:
        call = {"tool_name": name, "args_list": args[0] if args else {}}
        messages += [Message(role="assistant", content=json.dumps(call)),
                     Message(role="observation",
                             content=json.dumps({"tool_name": name, "response": response}))]
    return RunState(run_id="r", session_id="s", question=question, messages=messages,
                    json_mode="object")


def check(s: RunState, answer: dict) -> dict | None:
    record = StepRecord(index=len(s.steps) + 1, thought="", calls=[CallRecord(tool=FINAL,
                                                                              args=answer)])
    s.steps.append(record)
    return nudge(s, record, FINAL, TOOLS)


def unseen(s: RunState, text: str) -> list[str]:
    found = check(s, {"output": text})
    return found["unconfirmed"] if found else []


def test_numbers_are_read_in_digits_and_words():
    read = {m.text: m.values for m in in_text(
        "48,213 and forty-eight thousand two hundred and thirteen, 3.5%, 1.5 million, 2,000.75")}
    assert read["48,213"] == (48213.0,)
    assert read["forty-eight thousand two hundred and thirteen"] == (48213.0,)
    assert read["3.5%"] == (3.5, 0.035)
    assert read["1.5 million"] == (1500000.0,)
    assert read["2,000.75"] == (2000.75,)


def test_a_number_no_tool_showed_is_nudged_with_its_text():
    s = state("What did the two orders total?", ("get_order", {"id": 7, "amount": 31250}),
              ("get_order", {"id": 9, "amount": 16963}))
    found = check(s, {"output": "They total 48,214."})
    assert found["unconfirmed"] == ["48,214"]
    assert found["error"] == ("Your answer contains 48,214, which no tool result or answer "
                              "shows. Compute it with CodeInterpreterTool, or call "
                              "TaskCompleteTool again to confirm.")


def test_one_arithmetic_step_from_what_was_seen_is_not_nudged():
    s = state("What did the two orders total?", ("get_order", {"amount": 31250}),
              ("get_order", {"amount": "16,963"}))
    assert unseen(s, "They total 48,213.") == []          # a sum of two figures seen
    assert unseen(s, "The difference is 14287.") == []    # a difference
    assert unseen(s, "Twice the first is 62500.") == []   # with a constant
    assert unseen(s, "About 65% of it was the first.") == []  # a ratio, as a percentage
    assert unseen(s, "They total 48,313.") == ["48,313"]   # a sum gone wrong


def test_numbers_in_words_are_matched_both_ways():
    s = state("How many seats?", ("get_hall", {"seats": "forty-eight thousand two hundred thirteen"}))
    assert unseen(s, "The hall has 48,213 seats.") == []
    s = state("How many seats?", ("get_hall", {"seats": 48213}))
    assert unseen(s, "It has forty-eight thousand two hundred and thirteen seats.") == []
    assert unseen(s, "It has forty-nine thousand seats.") == ["forty-nine thousand"]


def test_thousands_separators_and_decimals_are_matched_to_the_precision_written():
    s = state("Rate?", ("get_rate", {"rate": 3.14159, "population": 1523406}))
    assert unseen(s, "The rate is 3.14, for 1.5 million people (1,523,406).") == []
    assert unseen(s, "The rate is 3.15.") == ["3.15"]
    assert unseen(s, "The rate is 3.1416.") == []
    assert unseen(s, "Some 1,600,000 people.") == ["1,600,000"]  # a whole number is exact


def test_small_integers_the_question_and_the_clock_are_seen():
    s = state("Split 1,200 euros among 3 people; what does each get?")
    assert unseen(s, "Each of the 3 gets 400 euros of the 1,200.") == []  # 1,200 / 3
    s = state("What year is it?", ("GetTimeTools", {"now": "2025-03-14T10:22:05+00:00"}))
    assert unseen(s, "It is 2025; today is March 14, at 10:22.") == []
    assert unseen(s, "A week on is March 21.") == []  # 14 + 7: one step
    assert unseen(s, "It is day 173 of the year.") == ["173"]  # worked out in the head


def test_a_clock_reading_is_shifted_in_one_step_but_not_turned_into_a_duration():
    s = state("How many whole minutes are left until midnight UTC tonight?",
              ("GetTimeTools", {"now": "12:33", "timezone": "UTC"}))
    assert unseen(s, "720 minutes") == ["720"]  # 12 x 60: the 33 minutes forgotten
    assert unseen(s, "687 minutes") == ["687"]  # right, but two steps: code shows it
    s = state("What is 1000! ?", ("GetTimeTools", {"now": "2026-11-27T12:30:00+00:00"}))
    assert unseen(s, "It has 240 trailing zeros.") == ["240"]  # not 30 x 8
    s = state("What hour is it in Tokyo?", ("GetTimeTools", {"now": "2026-11-27 12:33"}))
    assert unseen(s, "It is 21:33 in Tokyo, 12:33 in London.") == []  # 12 + 9
    s = state("When is the last van?", ("depot", {"cutoff": "14:30", "vans": 30}))
    assert unseen(s, "At 14:30; 60 vans a day, twice the 30 today.") == []
    for now in ("2026-12-05T12:33:00+00:00", "2026-11-12 12:33"):  # a month or day of 12
        s = state("Minutes to midnight?", ("GetTimeTools", {"now": now}))
        assert unseen(s, "720 minutes") == ["720"], now
    s = state("How long?", ("meeting", {"start": "14:15", "end": "14:50"}))
    assert unseen(s, "It lasts 35 minutes.") == []  # one clock reading less another
    s = state("Minutes to midnight?", ("GetTimeTools", {"12:33": "now"}))  # a key
    assert unseen(s, "720 minutes") == ["720"]
    s = state("How old do I turn?", ("GetTimeTools", {"now": "2026-11-27T12:33:00+00:00"}),
              ("AskHumanHelpTool", "1990"))
    assert unseen(s, "You turn 36 this year.") == []  # the year stays a number


def test_past_max_operands_a_clock_reading_is_still_shifted_by_a_constant():
    many = [10**6 + 7919 * i for i in range(300)]  # none a step from 22
    s = state("What hour is it in Tokyo?", ("lookup", many), ("GetTimeTools", {"now": "13:33"}))
    assert unseen(s, "It is 22:33 in Tokyo.") == []


def test_a_number_a_code_cell_printed_counts_and_its_source_code_does_not():
    s = state("What is 17 to the 5th?", ("CodeInterpreterTool",
                                         {"stdout": "1419857\n", "exit_code": 0}))
    assert unseen(s, "17**5 is 1,419,857.") == []
    s = state("What is 17 to the 5th?", ("CodeInterpreterTool",
                                         {"ran": "x = 1419857", "stdout": "", "exit_code": 0}))
    assert unseen(s, "It is 1419857.") == ["1419857"]


def cell(code: str, stdout: str) -> tuple:
    return ("CodeInterpreterTool", {"stdout": stdout + "\n", "exit_code": 0}, {"code": code})


def test_a_number_or_date_a_cell_wrote_itself_and_printed_is_not_seen():
    """Asked for the 50th Fibonacci number, the 1.5B model was nudged for 1258626907159,
    then had code print that literal and gave it again (round 14)."""
    question = "What is the 50th Fibonacci number?"
    echoed = cell("print(1258626907159)", "1258626907159")
    assert unseen(state(question, echoed), "It is 1258626907159.") == ["1258626907159"]
    assert unseen(state(question, ("lookup", {"fib_50": 1258626907159}), echoed),
                  "It is 1258626907159.") == []  # seen where it came from, all the same
    loop = "a, b = 0, 1\nfor _ in range(50):\n    a, b = b, a + b\n"
    for computed in (cell(loop + "print(a)", "12586269025"),
                     # what a cell checks its result against, or says in a comment, it computed
                     cell(loop + "print(a, a == 12586269025)", "12586269025 True"),
                     cell(loop + "assert a == 12586269025\nprint(a)  # 12586269025",
                          "12586269025")):
        assert unseen(state(question, computed), "It is 12,586,269,025.") == []
    today = ("GetTimeTools", {"now": "2026-11-27"})
    for code in ("print('2027-01-17')", "from datetime import date\nprint(date(2027, 1, 17))"):
        s = state("The date in 100 days?", today, cell(code, "2027-01-17"))
        assert unseen(s, "2027-01-17") == ["2027-01-17"]
    computed = cell("from datetime import date, timedelta\n"
                    "print(date(2026, 11, 27) + timedelta(days=100))", "2027-03-07")
    assert unseen(state("The date in 100 days?", today, computed), "2027-03-07") == []


def test_a_run_whose_cell_only_prints_the_nudged_number_is_nudged_again():
    answer = step(FINAL, {"output": "It is 1258626907159."})
    model = ScriptedModel([answer, step("CodeInterpreterTool", {"code": "print(1258626907159)"}),
                           answer, answer])
    result = Agent(model=model, config=AgentConfig(check_answers=True)).run(
        "What is the 50th Fibonacci number?")
    assert result.status == "completed" and result.answer == "It is 1258626907159."
    assert result.stats.answer_nudges == 2 and len(result.steps) == 4  # then confirmed
    first, second = (result.steps[i].observation["error"] for i in (0, 2))
    assert "no tool result or answer shows" in first  # nothing was printed yet
    assert "printed only because you wrote it into its code" in second  # not "compute it" again
    assert "last code cell printed" not in second


def test_a_nudge_after_a_code_cell_repeats_what_the_cell_printed():
    """Through a server the 1.5B model had code print 2027-03-07, then gave 2027-01-17 (the
    date the nudge named) twice more (round 16)."""
    def nudged_after(code: str) -> str:
        answer = step(FINAL, {"output": "It is 2027-01-17."})
        model = ScriptedModel([step("CodeInterpreterTool", {"code": code}), answer, answer])
        result = Agent(model=model, config=AgentConfig(check_answers=True)).run(
            "Which date is 100 days after 2026-11-27?")
        return result.steps[1].observation["error"]

    hundred = "from datetime import date, timedelta\nd = date(2026, 11, 27) + timedelta(days=100)\n"
    said = nudged_after(hundred + "print('The date is', d)")
    assert said.endswith("Your last code cell printed: The date is 2027-03-07")
    long = nudged_after(hundred + "print(*range(10**12, 10**12 + 20), d)")
    assert long.endswith(" 1000000000019 2027-03-07")  # from a whole number on: a cut one
    assert long.split("printed: ...")[1].startswith("1000000000")  # was never printed
    for code in (hundred + "print(d.strftime('%A'))",  # no number or date: nothing to repeat
                 hundred + "print(d)\nraise ValueError('no')"):  # the cell failed
        assert "last code cell" not in nudged_after(code)
    # one figure held back is the cell's echo, another was never printed: the note is the
    # usual one, and repeats no output (it would show the echoed figure it says nobody showed)
    answer = step(FINAL, {"output": "1258626907159 and 1548008755920"})
    model = ScriptedModel([step("CodeInterpreterTool", {"code": "print(1258626907159)"}),
                           answer, answer])
    said = Agent(model=model, config=AgentConfig(check_answers=True)).run(
        "What are the 50th and 60th Fibonacci numbers?").steps[1].observation["error"]
    assert "no tool result or answer shows" in said and "last code cell" not in said


def test_the_nudge_says_a_number_was_only_echoed_when_each_unseen_one_was():
    question = "What is the 50th Fibonacci number, and the 60th?"
    echoed = cell("print(1258626907159)", "1258626907159")
    words = "printed only because you wrote"
    found = check(state(question, echoed), {"output": "It is 1258626907159."})
    assert words in found["error"] and found["unconfirmed"] == ["1258626907159"]
    found = check(state(question, echoed), {"output": "1258626907159 and 1548008755920"})
    assert words not in found["error"]  # one of them was never printed at all
    assert found["unconfirmed"] == ["1258626907159", "1548008755920"]
    s = state(question, echoed)  # an echo of an earlier run that had code, in one that has none
    record = StepRecord(index=1, thought="", calls=[CallRecord(tool=FINAL, args={
        "output": "It is 1258626907159."})])
    s.steps.append(record)
    assert "Look it up or work it out" in nudge(s, record, FINAL, [FINAL])["error"]
    day = check(state("The date in 100 days?", ("GetTimeTools", {"now": "2026-11-27"}),
                      cell("print('2027-01-17')", "2027-01-17")), {"output": "2027-01-17"})
    assert "printed only because you wrote it" in day["error"]


def test_each_cell_of_a_step_of_several_calls_is_read_with_its_own_code():
    def several(*calls: tuple[str, str, str]) -> RunState:
        """One step of these (tool, code, stdout) calls, then their observations in order."""
        s = state("What do orders A and B total?")
        envelopes = [{"tool_name": t, "args_list": {"code": code} if code else {"order": "A"}}
                     for t, code, _ in calls]
        s.messages.append(Message(role="assistant",
                                  content=json.dumps({"thought": "", "calls": envelopes})))
        for t, _, out in calls:
            response = {"stdout": out + "\n"} if t == "CodeInterpreterTool" else {"total": out}
            s.messages.append(Message(role="observation",
                                      content=json.dumps({"tool_name": t, "response": response})))
        return s

    code = "CodeInterpreterTool"
    echo, sum_ = (code, "print(48213)", "48213"), (code, "print(48000 + 213)", "48213")
    assert unseen(several(echo, sum_), "They total 48,213.") == []  # the second computed it
    assert unseen(several(echo, (code, "print(31250 + 18750)", "50000")),
                  "They total 48,213.") == ["48,213"]
    assert unseen(several(("get_order", "", "777"), echo), "They total 48,213.") == ["48,213"]
    assert unseen(several(("get_order", "", "48213"), echo), "They total 48,213.") == []


def test_the_persons_answer_counts():
    s = state("Book a table", ("AskHumanHelpTool", "We are twelve, and the budget is 640."))
    assert unseen(s, "A table for 12 within the 640 budget.") == []


def test_a_typed_answers_numeric_fields_are_checked():
    s = state("Which city, and how many people?", ("lookup", {"city": "Oslo", "people": 709037}))
    assert check(s, {"city": "Oslo", "population": 709037}) is None
    found = check(s, {"city": "Oslo", "population": 710000, "note": "about 7.1e5"})
    assert found["unconfirmed"] == ["710,000"]  # an integer field is exact; the note's 7.1e5 rounds


def test_a_confirmed_answer_is_accepted_and_only_new_numbers_are_nudged():
    s = state("Total?", ("get_order", {"amount": 31250}))
    first = check(s, {"output": "It is 48,213."})
    s.steps[-1].observation, s.steps[-1].error = first, True
    assert check(s, {"output": "It is 48,213."}) is None          # called again: confirmed
    s = state("Total?", ("get_order", {"amount": 31250}))
    s.steps.append(StepRecord(index=1, thought="", calls=[CallRecord(
        tool=FINAL, args={}, observation=check(s, {"output": "It is 48,213."}))]))
    assert unseen(s, "It is 48,213, or 50,001.") == ["50,001"]    # a new one has its nudge


def test_an_answer_given_again_after_other_calls_is_checked_afresh():
    """Code that printed another figure between the nudge and the answer given again: the
    answer is nudged once more (the cap still holds), and the figure printed is taken."""
    s = state("The date in 100 days?", ("GetTimeTools", {"now": "2026-11-27"}))
    first = check(s, {"output": "2027-01-17"})
    s.steps[-1].calls[0].observation = first
    s.steps.append(StepRecord(index=2, thought="", calls=[CallRecord(
        tool="CodeInterpreterTool", args={}, observation={"stdout": "2027-03-07\n"})]))
    s.messages.append(Message(role="observation", content=json.dumps(
        {"tool_name": "CodeInterpreterTool", "response": {"stdout": "2027-03-07\n"}})))
    assert unseen(s, "2027-01-17") == ["2027-01-17"]
    s.steps.pop()
    assert check(s, {"output": "2027-03-07"}) is None

    @tool
    def order_total(order: str) -> dict:
        """The total of an order."""
        return {"order": order, "total": 31250}

    answer = step(FINAL, {"output": "They total 48,213."})
    model = ScriptedModel([step("order_total", {"order": "A"}), answer,
                           step("CodeInterpreterTool", {"code": "print(31250 + 18750)"}),
                           answer, answer])
    from jsonagent.tools.toolset import core_tools

    result = Agent(model=model, tools=[*core_tools(), order_total],
                   config=AgentConfig(check_answers=True)).run("What do orders A and B total?")
    assert result.status == "completed" and result.answer == "They total 48,213."
    assert result.stats.answer_nudges == 2  # then given again at once: confirmed


def test_the_nudges_of_a_run_are_capped():
    s = state("Total?")
    for n in (111, 222):
        found = check(s, {"output": f"It is {n}."})
        s.steps[-1].observation, s.steps[-1].error = found, True
    assert check(s, {"output": "It is 333."}) is None


def test_a_run_is_nudged_once_then_takes_the_confirmed_answer():
    @tool
    def order_total(order: str) -> dict:
        """The total of an order."""
        return {"order": order, "total": 31250}

    answer = step(FINAL, {"output": "The two orders total 48,213."})
    model = ScriptedModel([step("order_total", {"order": "A"}), answer, answer])
    result = Agent(model=model, tools=[order_total],
                   config=AgentConfig(check_answers=True)).run("What do orders A and B total?")
    assert result.status == "completed" and result.answer == "The two orders total 48,213."
    assert result.stats.answer_nudges == 1 and len(result.steps) == 3
    # the held-back reply is not in the history: the note stands in its place
    first, nudged = model.requests[1]["messages"], model.requests[2]["messages"]
    assert nudged[:-1] == first and nudged[-1]["role"] == "user"
    assert "48,213, which no tool result or answer shows" in nudged[-1]["content"]
    assert "48,213" not in json.dumps(first)


def test_a_scripted_model_is_not_checked_unless_asked():
    model = ScriptedModel([step(FINAL, {"output": "48,213"})])
    agent = Agent(model=model)
    assert agent.config.check_answers is False
    assert agent.run("x").stats.answer_nudges == 0


def test_check_answers_is_a_cli_option(tmp_path):
    from test_cli import cli, script

    answer = step(FINAL, {"output": "48,213"})
    model = script(tmp_path, answer, answer)
    env = {"JSONAGENT_HOME": str(tmp_path)}
    checked = cli("run", "Total?", "--model", model, "--check-answers", "--output", "json",
                  "--no-store", env=env)
    assert json.loads(checked.stdout)["stats"]["answer_nudges"] == 1, checked.stderr
    unchecked = cli("run", "Total?", "--model", model, "--output", "json", "--no-store", env=env)
    assert json.loads(unchecked.stdout)["stats"]["answer_nudges"] == 0, unchecked.stderr


def test_two_constants_make_no_number_seen():
    s = state("Anything?", ("get_order", {"note": "none"}))
    assert unseen(s, "It is 72, or 1024, or 83.33.") == ["72", "1024", "83.33"]


def test_a_change_as_a_share_and_a_version_prefix_are_seen():
    s = state("How did sales go?", ("get_sales", {"before": 48213, "after": 52100,
                                                  "python": "3.12.1"}))
    assert unseen(s, "Sales grew 8.1% (8.06%), on Python 3.12.") == []
    s = state("How did sales go?", ("get_sales", {"before": 48213, "after": 52100}))
    assert unseen(s, "Sales grew 9.4%.") == ["9.4%"]


def test_dates_are_checked_as_dates_not_as_their_parts():
    from jsonagent.dates import in_text as dates_in
    from datetime import date
    read = {m.text: [date.fromordinal(d).isoformat() for d in m.days] for m in dates_in(
        "2027-03-07T10:00, 05.03.2027, 3/7/2027, March 7, 2027 and 7th of Mar 2027; "
        "not March 7, 3.12.1 or 07:34")}
    assert read == {"2027-03-07": ["2027-03-07"], "05.03.2027": ["2027-03-05"],
                    "3/7/2027": ["2027-03-07", "2027-07-03"], "March 7, 2027": ["2027-03-07"],
                    "7th of Mar 2027": ["2027-03-07"]}
    today = ("GetTimeTools", {"now": "2026-11-27 06:46", "weekday": "Friday"})
    s = state("What is the date 100 days from today?", today)
    assert unseen(s, "It is 2027-01-17.") == ["2027-01-17"]  # its parts, 2027 and 17, are
    assert unseen(state("The date in 100 days?", today), "March 7, 2027") == []  # one step
    assert unseen(state("And tomorrow?", today), "28.11.2026, a Saturday") == []
    on_28th = ("GetTimeTools", {"now": "2026-11-28", "weekday": "Saturday"})
    assert unseen(state("The date in 100 days?", on_28th), "2027-01-28") == ["2027-01-28"]
    # a month, a quarter, half a year and a year on
    for later in ("2026-12-28", "2027-02-28", "2027-05-28", "2027-11-28"):
        assert unseen(state("When is it due?", on_28th), later) == []
    assert unseen(state("And in 3 months?", on_28th), "2027-02-28") == []
    printed = ("CodeInterpreterTool", {"stdout": "2027-03-07\n", "exit_code": 0})
    assert unseen(state("100 days on?", today, printed), "On 7 March 2027") == []
    contract = ("contract", {"signed": "2027-01-31", "term_months": 13})
    assert unseen(state("When does it end?", contract), "It ends 2028-02-29.") == []
    assert unseen(state("When does it end?", contract), "It ends 2028-03-01.") == \
        ["2028-03-01"]
    confirmed = state("The date in 100 days?", today)
    confirmed.steps.append(StepRecord(index=1, thought="", calls=[CallRecord(
        tool=FINAL, args={}, observation=check(confirmed, {"output": "2027-01-17"}))]))
    assert unseen(confirmed, "It is 2027-01-17") == []  # called again: confirmed
    assert unseen(state("When?"), "On 2027-01-17") == []  # no day seen to step from


def test_a_nudge_of_an_earlier_run_of_the_session_is_no_source():
    earlier = state("Total?", ("get_order", {"amount": 31250}))
    said = check(earlier, {"output": "It is 48,213."})["error"]
    s = state("And the total again?", ("get_order", {"amount": 31250}))
    s.messages.insert(2, Message(role="user", content=said))  # in its reply's place
    assert unseen(s, "It is 48,213.") == ["48,213"]
    s.messages.insert(2, Message(role="user", content="I think it is 48,213."))
    assert unseen(s, "It is 48,213.") == []  # what the person said is seen
    echoed = check(state("Total?", cell("print(48213)", "48213")), {"output": "48,213"})
    s = state("And the total again?", ("get_order", {"amount": 31250}))
    s.messages.insert(2, Message(role="user", content=echoed["error"]))
    assert "printed only" in echoed["error"] and unseen(s, "It is 48,213.") == ["48,213"]
    printed = "Your answer contains 48,213, which no tool result or answer shows. Compute " \
        "it with CodeInterpreterTool, or call TaskCompleteTool again to confirm. Your last " \
        "code cell printed: 48213"
    s = state("And the total again?", ("get_order", {"amount": 31250}))
    s.messages.insert(2, Message(role="user", content=printed))
    assert unseen(s, "It is 48,213.") == ["48,213"]
