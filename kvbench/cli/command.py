"""The click classes behind every kvbench command: a bad option value is one line of input error, flags show no type."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from kvbench.config import ConfigError


def _untyped_flags(params: list[Any]) -> list[Any]:
    # typer prints a `<bool>` type beside flags, which take no value; an empty metavar prints nothing there.
    for p in params:
        if isinstance(p, TyperOption) and p.is_flag and p.metavar is None:
            p.metavar = ""
    return params


def _one_line(e: typer.BadParameter) -> str:
    """`--name: what is wrong`, as kvbench's own input errors read."""
    opts = getattr(e.param, "opts", None) or []
    name = next((o for o in opts if o.startswith("--")), None)
    # typer 0.29+ validates through pydantic, whose messages open with the error's class ("Value error, ...").
    message = e.message.removeprefix("Value error, ")
    return f"{name}: {message}" if name else e.format_message()


class Command(TyperCommand):
    """A kvbench command: an invalid option value (a choice not in its Enum, a non-number) is reported as every other
    bad input is, one `kvbench: error:` line and exit 2; a missing or unknown option keeps click's usage message."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except typer.BadParameter as e:
            if type(e).__name__ == "MissingParameter":  # a usage error: the usage line helps there
                raise
            raise ConfigError(_one_line(e)) from None

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


class Group(TyperGroup):
    """A kvbench command group (the app, `kvbench trace`): flags without a type, as in Command."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))
