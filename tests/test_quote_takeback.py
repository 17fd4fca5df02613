"""The local backend's take-back of a `"` that closes a code string too early
(models/decoding.py CodeQuotes), as a mechanism: tests/e2e/test_quote_takeback.py runs it on
a real model."""

import numpy as np

from jsonagent.models.decoding import CodeQuotes, _quoting, closes_code_early, open_code

STEP = '{"thought": "print it", "tool_name": "CodeInterpreterTool", "args_list": {"code": "'


def test_the_open_code_string_is_found_and_only_a_code_value_counts():
    assert open_code(STEP + "x = 1") == "x = 1"
    assert open_code(STEP + 'print(\\"a') == 'print(\\"a'
    assert open_code('{"thought": "print(') is None        # not code
    assert open_code(STEP + 'x = 1"}') is None              # closed already


def test_a_quote_that_leaves_a_string_or_a_bracket_open_is_taken_back():
    assert closes_code_early(STEP + "print(", '"')                   # print("hi") written raw
    assert closes_code_early(STEP + "print(", '"}}')                 # a token that closes all
    assert closes_code_early(STEP + "s = '''abc", '"')               # a triple-quoted string
    assert closes_code_early(STEP + "xs = [1, 2", '",')


def test_a_quote_that_ends_code_that_compiles_or_is_only_wrong_is_kept():
    assert not closes_code_early(STEP + "print(1)", '"')
    assert not closes_code_early(STEP + 'print(\\"hi\\")', '"}}')      # escaped as it should be
    assert not closes_code_early(STEP + "x = = 1", '"')              # wrong, not cut short
    assert not closes_code_early(STEP + "print(", "hi")              # no quote in the token
    assert not closes_code_early(STEP + "print(\\", '"')             # the quote is escaped
    assert not closes_code_early('{"thought": "print(', '"')          # not a code string


def test_tokens_that_close_a_string_are_the_ones_forbidden():
    pieces = [b'"', b'"}', b'\\"', b"print", b'("', b"'"]
    quoting = np.array([_quoting(p) for p in pieces])
    assert quoting.tolist() == [True, True, False, False, True, False]


    def detokenize(tokens):
        return b"".join(pieces[t] for t in tokens)

    quotes = CodeQuotes(quoting, detokenize)
    out = [3]  # "print"
    assert not quotes.takes_back(out, 3)
    logits = np.array([5.0, 4.0, 1.0, 0.0, 3.0, 2.0])
    kept = quotes.forbid(logits)
    assert int(np.argmax(kept)) == 5 and np.isneginf(kept[[0, 1, 4]]).all()
    assert quotes.forbid(np.array([1.0, 1.0, -np.inf, -np.inf, 1.0, -np.inf]))[0] == 1.0



def test_take_backs_are_bounded_per_reply(monkeypatch):
    import jsonagent.models.decoding as decoding

    pieces = [STEP.encode() + b"print(", b'"']
    quotes = CodeQuotes(np.array([False, True]), lambda ts: b"".join(pieces[t] for t in ts))
    taken = [quotes.takes_back([0], 1) for _ in range(decoding.TAKEBACKS + 2)]
    assert taken.count(True) == decoding.TAKEBACKS and taken[-1] is False
