"""More embedding tasks, of the kinds the server path missed on held-out tasks (issue 37):
- a number that must be worked out with code, not in the head (a weekday 100 days after a
  looked-up date, the days between two looked-up dates, a currency conversion, a percentage);
- a sum of two looked-up figures, where one figure alone (or all three) is the tempting answer;
- a lookup that must call the one tool that knows (a similar tool does not have the field);
- a fact only the person has, asked once;
- the right item picked from structured data: the cheapest one that meets a condition;
- a typed answer whose numbers are computed (a count and a total);
- an approval the person grants, for the one call that matches what was asked.

The data is invented, so no model knows it. Pure standard library, like the rest of the list.
"""

from __future__ import annotations

from dataclasses import dataclass

from .embedding import Embedding, ToolFailure, _counted


def contract_weekday() -> Embedding:
    def contract_details(contract: str) -> dict:
        """A contract's parties and its start date.

        Args:
            contract: The contract's id, such as 'K-1234'.
        """
        if contract.strip().upper() != "K-5190":
            raise ToolFailure(f"no contract {contract!r}")
        return {"contract": "K-5190", "client": "Hollin & Marsh", "start_date": "2027-02-11",
                "notice_days": 30}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, contract_details)], calls=calls,
                     holds=lambda: calls.get("contract_details", 0) > 0)


def contract_term() -> Embedding:
    def contract_dates(contract: str) -> dict:
        """A contract's signing date and end date, as YYYY-MM-DD.

        Args:
            contract: The contract's id, such as 'K-12'.
        """
        if contract.strip().upper() != "K-17":
            raise ToolFailure(f"no contract {contract!r}; ids look like K-17")
        return {"contract": "K-17", "signed": "2026-11-18", "ends": "2027-09-03"}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, contract_dates)], calls=calls,
                     holds=lambda: calls.get("contract_dates", 0) > 0)


def two_stores() -> Embedding:
    def stock_levels(sku: str) -> dict:
        """Units of one item held in each of our warehouses.

        Args:
            sku: The item's stock code, such as 'SK-100'.
        """
        if sku.strip().upper() != "SK-3308":
            raise ToolFailure(f"no item {sku!r}")
        return {"sku": "SK-3308", "units_by_warehouse": {
            "Oban Road": 412, "Dunmore": 1284, "Kestrel Quay": 967}}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, stock_levels)], calls=calls,
                     holds=lambda: calls.get("stock_levels", 0) > 0)


def currency_total() -> Embedding:
    def order_total(order: str) -> dict:
        """An order's total in the currency it was placed in, with today's rate of that
        currency to US dollars.

        Args:
            order: The order's id, such as 'H-100'.
        """
        if order.strip().upper() != "H-2207":
            raise ToolFailure(f"no order {order!r}")
        return {"order": "H-2207", "customer": "Halden Tre", "total": 1840, "currency": "NOK",
                "usd_per_unit": 0.0937}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, order_total)], calls=calls,
                     holds=lambda: calls.get("order_total", 0) > 0)


def sla_share() -> Embedding:
    def ticket_stats(quarter: str) -> dict:
        """Support ticket counts for one quarter of 2027.

        Args:
            quarter: The quarter, such as 'Q1'.
        """
        if quarter.strip().upper() not in ("Q2", "2027-Q2", "Q2 2027"):
            raise ToolFailure(f"no figures for {quarter!r} yet; only Q2 is closed")
        return {"quarter": "Q2", "opened": 203, "closed": 184, "closed_within_sla": 157}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, ticket_stats)], calls=calls,
                     holds=lambda: calls.get("ticket_stats", 0) > 0)


def depot_cutoff() -> Embedding:
    def depot_info(depot: str) -> dict:
        """A depot's address, phone number and manager.

        Args:
            depot: The depot's name.
        """
        if "lindqvist" not in depot.lower():
            raise ToolFailure(f"no depot {depot!r}")
        return {"depot": "Lindqvist", "address": "Hamnvagen 4, Skarholm", "phone": "+46 31 770 12",
                "manager": "Ebba Lund"}

    def depot_schedule(depot: str) -> dict:
        """A depot's opening hours and its daily cut-off time for same-day dispatch.

        Args:
            depot: The depot's name.
        """
        if "lindqvist" not in depot.lower():
            raise ToolFailure(f"no depot {depot!r}")
        return {"depot": "Lindqvist", "opens": "06:30", "closes": "19:00",
                "same_day_cutoff": "14:45"}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, depot_info), _counted(calls, depot_schedule)], calls=calls,
                     holds=lambda: calls.get("depot_schedule", 0) > 0)


def asked_employee() -> Embedding:
    def leave_balance(employee: str) -> dict:
        """An employee's leave for this year: days allowed and days already taken.

        Args:
            employee: The employee number, such as 'E-1000'.
        """
        if employee.strip().upper() != "E-4471":
            raise ToolFailure(f"no employee {employee!r}")
        return {"employee": "E-4471", "days_allowed": 25, "days_taken": 9}

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, leave_balance)], calls=calls,
                     holds=lambda: calls.get("leave_balance", 0) > 0)


def picked_supplier() -> Embedding:
    def supplier_quotes(item: str) -> list:
        """Every supplier's quote for an item: unit price and the days delivery takes.

        Args:
            item: What to buy, such as 'hex nuts'.
        """
        if "bolt" not in item.lower():
            return []
        return [{"supplier": "Norrby Fasteners", "unit_price_eur": 0.41, "lead_days": 9},
                {"supplier": "Arkwell Steel", "unit_price_eur": 0.52, "lead_days": 3},
                {"supplier": "Cobb & Daughters", "unit_price_eur": 0.47, "lead_days": 4},
                {"supplier": "Tarrow Metals", "unit_price_eur": 0.58, "lead_days": 2}]

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, supplier_quotes)], calls=calls,
                     holds=lambda: calls.get("supplier_quotes", 0) > 0)


@dataclass
class InvoiceSummary:
    invoice: str
    lines: int
    total_eur: float


def typed_invoice() -> Embedding:
    def invoice_lines(invoice: str) -> list:
        """The lines of an invoice: item, quantity and unit price in euros.

        Args:
            invoice: The invoice's number, such as 'INV-100'.
        """
        if invoice.strip().upper() != "INV-8841":
            raise ToolFailure(f"no invoice {invoice!r}")
        return [{"item": "cable ties (pack)", "quantity": 12, "unit_price_eur": 3.75},
                {"item": "junction box", "quantity": 4, "unit_price_eur": 18.2},
                {"item": "wire nut", "quantity": 30, "unit_price_eur": 0.95}]

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, invoice_lines)], output=InvoiceSummary, calls=calls,
                     holds=lambda: calls.get("invoice_lines", 0) > 0)


def approved_refund() -> Embedding:
    refunded: list[tuple[str, float]] = []

    def order_payment(order: str) -> dict:
        """What a customer paid for an order, and how.

        Args:
            order: The order's id, such as 'O-1000'.
        """
        if order.strip().upper() != "O-5512":
            raise ToolFailure(f"no order {order!r}")
        return {"order": "O-5512", "paid_eur": 64.9, "method": "card", "status": "returned"}

    def refund(order: str, amount_eur: float) -> str:
        """Refund an amount of an order to the customer's original payment method.

        Args:
            order: The order's id.
            amount_eur: The amount to refund, in euros.
        """
        refunded.append((order.strip().upper(), float(amount_eur)))
        return f"refunded {amount_eur} EUR for {order}: reference RF-{len(refunded)}0417"

    def approve(name: str, args: dict) -> bool:
        """The person approves the refund of exactly what was paid for O-5512, nothing else."""
        try:
            return name == "refund" and str(args.get("order", "")).strip().upper() == "O-5512" \
                and abs(float(args.get("amount_eur")) - 64.9) < 0.005
        except (TypeError, ValueError):
            return False

    calls: dict[str, int] = {}
    return Embedding([_counted(calls, order_payment), _counted(calls, refund)],
                     confirm={"refund"}, approve=approve, calls=calls,
                     holds=lambda: refunded == [("O-5512", 64.9)])
