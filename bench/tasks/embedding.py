"""Tasks that embed the agent as a script would: each brings its own tool functions, and some
a typed answer or a call the person refuses. The data is invented, so no model knows it.

Each task's `embed()` makes a fresh `Embedding` per run: its tools (plain typed functions
with docstrings, which both frameworks turn into tools), the tools whose calls the scripted
person is asked to approve (and whether they do: by default they refuse), the answer's type,
and `holds()`, what must be true of the world after the run besides the answer (say, that a
refused tool never ran).

Pure standard library, like the rest of the task list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable


class ToolFailure(Exception):
    """A tool's error, with the message the model reads next."""


@dataclass
class Embedding:
    tools: list[Callable]
    confirm: set[str] = field(default_factory=set)
    """Tools whose calls the person is asked to approve."""
    approve: Callable[[str, dict], bool] = lambda name, args: False
    """The person's decision on such a call (tool name, arguments): by default, refused."""
    output: type | None = None
    holds: Callable[[], bool] = lambda: True
    calls: dict[str, int] = field(default_factory=dict)


@dataclass
class PartRecord:
    bin: str
    quantity: int


def _counted(calls: dict[str, int], fn: Callable) -> Callable:
    """The function, counting its calls under its name (for `holds`)."""
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[fn.__name__] = calls.get(fn.__name__, 0) + 1
        return fn(*args, **kwargs)

    counted.__name__, counted.__doc__ = fn.__name__, fn.__doc__
    counted.__annotations__ = fn.__annotations__
    counted.__wrapped__ = fn  # signatures (both frameworks read them) come from the original
    return counted


def typed_part() -> Embedding:
    def find_part(code: str) -> dict:
        """Look up a part in the warehouse by its part code.

        Args:
            code: The part code, such as 'AB-1234'.
        """
        if code.strip().upper() != "QX-4417":
            raise ToolFailure(f"no part {code!r}; known codes look like QX-4417")
        return {"code": "QX-4417", "name": "brass hinge", "bin": "R7-12", "quantity": 318}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, find_part)], output=PartRecord, calls=calls)


def denied_delete() -> Embedding:
    calls: dict[str, int] = {}

    def delete_report(name: str) -> str:
        """Delete a stored report by its file name.

        Args:
            name: The report's file name, such as 'summary.txt'.
        """
        return f"deleted {name}"

    return Embedding([_counted(calls, delete_report)], confirm={"delete_report"}, calls=calls,
                     holds=lambda: calls.get("delete_report", 0) == 0)


def booking_format() -> Embedding:
    calls: dict[str, int] = {}
    booked: list[str] = []

    def book_room(room: str, date: str) -> str:
        """Book a meeting room for a whole day and get the confirmation code.

        Args:
            room: The room's name.
            date: The day to book.
        """
        parts = date.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts) or len(parts[2]) != 4:
            raise ToolFailure("date must be written DD.MM.YYYY, for example 05.03.2027")
        if room.strip().lower() != "orion" or date != "05.03.2027":
            raise ToolFailure(f"room {room!r} is not free on {date}")
        booked.append(date)
        return "booked: confirmation ORI-5521"

    return Embedding([_counted(calls, book_room)], calls=calls, holds=lambda: booked == ["05.03.2027"])


def chained_orders() -> Embedding:
    def customer_id(name: str) -> str:
        """Find a customer's id from their full name.

        Args:
            name: The customer's full name.
        """
        if "brannock" not in name.lower():
            raise ToolFailure(f"no customer named {name!r}")
        return "C-20931"

    def open_orders(customer: str) -> list:
        """List a customer's open orders, with each order's total in euros.

        Args:
            customer: The customer's id, such as 'C-12345'.
        """
        if customer.strip() != "C-20931":
            raise ToolFailure(f"no customer with id {customer!r}; ids look like C-12345")
        return [{"order": "O-771", "total_eur": 412.5}, {"order": "O-779", "total_eur": 88.0}]

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, customer_id), _counted(calls, open_orders)], calls=calls,
                     holds=lambda: calls.get("open_orders", 0) > 0)


def asked_budget() -> Embedding:
    def project_budget(project: str) -> dict:
        """The approved budget of a project, in euros.

        Args:
            project: The project's name.
        """
        if "tamsin" not in project.lower():
            raise ToolFailure(f"no project {project!r}")
        return {"project": "Tamsin", "budget_eur": 73210}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, project_budget)], calls=calls,
                     holds=lambda: calls.get("project_budget", 0) > 0)


def picked_flight() -> Embedding:
    def list_flights(origin: str, destination: str) -> list:
        """All of today's flights between two cities, with departure time and price.

        Args:
            origin: The city the flight leaves from.
            destination: The city the flight goes to.
        """
        if "vellmar" not in origin.lower() or "ostrid" not in destination.lower():
            return []
        return [{"flight": "VK 310", "departs": "08:40", "price_eur": 96},
                {"flight": "VK 318", "departs": "11:15", "price_eur": 143},
                {"flight": "OS 902", "departs": "13:50", "price_eur": 121},
                {"flight": "VK 322", "departs": "17:05", "price_eur": 134}]

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, list_flights)], calls=calls,
                     holds=lambda: calls.get("list_flights", 0) > 0)


def answer_text(answer: Any) -> str:
    """A typed answer as the text checkers read."""
    if isinstance(answer, str):
        return answer
    if hasattr(answer, "__dataclass_fields__"):
        import dataclasses

        return json.dumps(dataclasses.asdict(answer))
    return json.dumps(answer, default=str)
