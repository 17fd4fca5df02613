"""The class of every jsonagent command (`@app.command(cls=PlainCommand)`).

typer writes a required argument as {question} in the usage line and prints its Python type
beside it in the help (question <str>). An argument reads better the way our options do, by
its metavar alone: QUESTION, or the name in capitals (NAME, FILES...) when it has none.
Only click's own hooks for the usage line and the help's lists are overridden, so typer's
parsing and its help for options stay as they are.
"""

from __future__ import annotations

from typer.core import TyperCommand


def _shown(argument) -> str:
    if argument.metavar:
        return argument.metavar
    return argument.name.upper() + ("" if argument.nargs == 1 else "...")


class PlainCommand(TyperCommand):
    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces += param.get_usage_pieces(ctx)
            else:
                pieces.append(_shown(param) if param.required else f"[{_shown(param)}]")
        return pieces

    def format_options(self, ctx, formatter) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":  # typer's first column is "name <type>"
                arguments.append((_shown(param), record[1]))
            elif param.param_type_name == "option":
                options.append(record)
        for title, records in (("Arguments", arguments), ("Options", options)):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)
