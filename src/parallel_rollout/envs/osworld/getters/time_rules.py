"""The ``rule_relativeTime`` getter: a task's expected dates written relative to today
("tomorrow", "next Monday", "10th next month" …) turned into text in the task's formats
(``{DoW}``, ``{Month}``, ``{DayD}``, ``{Day0D}``, ``{Year}``, ``{Month0D}``, ``{MonthD}``,
``{month}``, ``{MonthFull}``), as OSWorld computes them.

Today is taken in ``rules["timezone"]``; without one, OSWorld looks the timezone up from the
machine's public IP address, which here is the machine's own local timezone.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, tzinfo
from typing import Any

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_FULL = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
         "October", "November", "December")


def formatted(template: str, day: datetime) -> str:
    """``template`` with each placeholder (first occurrence) filled from ``day``."""
    for key, value in (("{DoW}", _DAYS[day.weekday()]), ("{Month}", _MONTHS[day.month - 1]),
                       ("{DayD}", str(day.day)), ("{Year}", str(day.year)), ("{Month0D}", f"{day.month:02d}"),
                       ("{month}", _FULL[day.month - 1].lower()), ("{MonthFull}", _FULL[day.month - 1]),
                       ("{Day0D}", f"{day.day:02d}"), ("{MonthD}", str(day.month))):
        template = template.replace(key, value, 1)
    return template


def _timezone(rules: dict) -> tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if "timezone" in rules:
        try:
            return ZoneInfo(rules["timezone"])
        except (ZoneInfoNotFoundError, ValueError):
            return ZoneInfo("UTC")
    return datetime.now().astimezone().tzinfo


def _day_of_next_month(now: datetime, day: int) -> datetime:
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, day, tzinfo=now.tzinfo)


def _first_monday(now: datetime, months: int, wrap_from: int) -> datetime:
    # OSWorld's arithmetic, month 0 included for the months it wraps to December
    year = now.year + 1 if now.month >= wrap_from else now.year
    start = datetime(year, (now.month + months) % 12, 1, tzinfo=now.tzinfo)
    return start + timedelta(days=((6 - start.weekday()) + 1) % 7)


def _start(name: str, now: datetime, alone: bool) -> datetime | None:
    """The day ``name`` means (``alone``: the rule has no ``to``, OSWorld's first table)."""
    weekday = now.weekday()
    if name == "tomorrow":
        return now + timedelta(days=1)
    if name in ("next Monday", "next Monday split"):
        return now + timedelta(days=(6 - weekday) + 1)
    if name == "5th next month" and alone:
        return _day_of_next_month(now, 5)
    if name == "10th next month":
        return _day_of_next_month(now, 10)
    if name == "this month" and alone:
        return now
    if name == "first monday four months later" and alone:
        return _first_monday(now, 4, 9)
    if name == "first monday eight months later" and alone:
        return _first_monday(now, 8, 5)
    if alone:
        return None
    if name == "this Saturday":
        return now + timedelta(days=5 - weekday)
    if name == "next Friday":
        return now + timedelta(days=4 - weekday if weekday < 4 else 7 if weekday == 4 else (7 - weekday) + 4)
    if name == "next Saturday":
        return now + timedelta(days=5 - weekday if weekday < 5 else 7 if weekday == 5 else 6)
    if name in ("next week Friday", "next week Saturday", "next week Sunday"):
        offset = {"Friday": 4, "Saturday": 5, "Sunday": 6}[name.rsplit(" ", 1)[1]]
        return now + timedelta(days=7 - weekday + offset)
    return None


def _end(name: str, start_name: str, start: datetime | None, now: datetime) -> datetime | None:
    weekday = now.weekday()
    if name == "tomorrow":
        return now + timedelta(days=1)
    if name == "this Sunday":
        return now + timedelta(days=6 - weekday)
    if name == "11th next month":
        return _day_of_next_month(now, 11)
    if name in ("next Friday", "next Friday split"):
        if start_name in ("next Monday", "next Monday split"):
            return start + timedelta(days=4)
        return now + timedelta(days=4 - weekday if weekday < 4 else (6 - weekday) + 5)
    if name == "next Sunday":
        if start_name in ("next Friday", "next Saturday"):
            return start + timedelta(days=6 - start.weekday())
        return now + timedelta(days=6 - weekday if weekday < 6 else 7)
    if name == "next week Sunday":
        if start_name in ("next week Friday", "next week Saturday"):
            return start + timedelta(days=6 - start.weekday())
        return now + timedelta(days=7 - weekday + 6)
    return None


def _fill(expected: dict, keys: tuple[str, ...], day: datetime | None) -> None:
    if day is None:
        raise ValueError(f"rule_relativeTime: no date for {keys}")
    for key in keys:  # a list holds acceptable formats, each filled (OSWorld's, since 1.0.2)
        value = expected[key]
        expected[key] = [formatted(v, day) for v in value] if isinstance(value, list) else formatted(value, day)


def get_rule_relativeTime(env, config: dict) -> Any:
    """The config's ``rules`` with ``expected`` dates filled in (see the module doc)."""
    rules = copy.deepcopy(config["rules"])
    relative, expected = rules["relativeTime"], rules["expected"]
    now = datetime.now(_timezone(rules))
    if "to" not in relative:
        _fill(expected, ("time",), _start(relative["from"], now, alone=True))
        return rules
    start = _start(relative["from"], now, alone=False)
    _fill(expected, ("puDay", "puMonth", "puYear") if relative["from"] == "next Monday split" else ("from",), start)
    end = _end(relative["to"], relative["from"], start, now)
    _fill(expected, ("doDay", "doMonth", "doYear") if relative["to"] == "next Friday split" else ("to",), end)
    return rules


GETTERS = {"rule_relativeTime": get_rule_relativeTime}
