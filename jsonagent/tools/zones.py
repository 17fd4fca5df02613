"""Time zone names as people and small models write them: the IANA name meant, when only
case or a space is off, or an error that says which names there are.

The error gives no fixed example: a 1.5B model asked for Mumbai's hour took 'Asia/Shanghai'
from "use an IANA name such as ... 'Asia/Shanghai'" and answered with China's clock.
"""

from __future__ import annotations

import difflib
from functools import lru_cache

CLOSE = 0.9
"""How alike a written name must be to an IANA name for it to be offered (difflib's ratio):
'Europe/Londn' is 0.96 from 'Europe/London', but 'Asia/Mumbai' is 0.86 from 'Asia/Dubai',
another city's clock."""

AREAS = ("Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia",
         "Europe", "Indian", "Pacific")


@lru_cache(maxsize=1)
def _names() -> dict[str, str]:
    from zoneinfo import available_timezones

    return {_key(name): name for name in sorted(available_timezones())}


def _key(name: str) -> str:
    return name.strip().lower().replace(" ", "_")


def canonical(name: str) -> str | None:
    """The IANA name `name` is, with case and spaces forgiven ('america/new york')."""
    return _names().get(_key(name))


def unknown(name: str) -> str:
    """One line for a name that is no zone: the names it is closest to, or else the names of
    its area, or else the areas."""
    names, key = _names(), _key(name)
    city = key.rsplit("/", 1)[-1]
    # never offered: 'GMT+8' meant as Beijing's clock would get 'Etc/GMT+8', which is UTC-8
    places = [k for k in names if not k.startswith("etc/")]
    close = [names[k] for k in difflib.get_close_matches(key, places, n=3, cutoff=CLOSE)]
    same_city = [names[k] for k in places if "/" in k and k.rsplit("/", 1)[-1] == city]
    offered = list(dict.fromkeys(close + same_city))[:3]
    said = f"unknown time zone {name!r}"
    if offered:
        return f"{said}; did you mean {' or '.join(repr(n) for n in offered)}?"
    area = key.split("/", 1)[0] if "/" in key else None
    in_area = [n for k, n in names.items() if area and k.startswith(area + "/")]
    if in_area:
        behind = " (Etc/GMT+N is N hours behind UTC)" if area == "etc" else ""
        return f"{said}; the IANA names in {in_area[0].split('/', 1)[0]}{behind} are: " + \
            ", ".join(in_area)
    return f"{said}; write an IANA name, Area/City, in one of the areas {', '.join(AREAS)}; " \
           "or 'UTC'"
