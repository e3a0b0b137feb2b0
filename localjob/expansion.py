"""Kubelet's $(VAR) expansion of command, args and env values."""

from __future__ import annotations

from collections.abc import Mapping


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Replace ``$(NAME)`` by its value when NAME is defined; ``$$`` is a literal ``$``.

    As in Kubernetes, a reference to an undefined variable, or one never closed, is left as written.
    """
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "$" and i + 1 < len(text):
            following = text[i + 1]
            if following == "$":
                out.append("$")
                i += 2
                continue
            if following == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2:close]
                    out.append(variables[name] if name in variables else text[i:close + 1])
                    i = close + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)
