"""The names the SVEB report prints for its methods and fields: each method's own label, the
paper's names for PPO critics nobody labelled, and the display name of a row key or field.
A method's kind is read from its record (:class:`hista.sveb.methods.Method`), never from its
label."""

from __future__ import annotations

from typing import Mapping

from .methods import Method

__all__ = ["report_labels", "label_of", "field_label", "lam_text"]


def lam_text(lam: float) -> str:
    """λ as the paper writes it: 0.95 -> "0.95", 1 -> "1.0"."""
    return str(float(lam))


def label_of(labels: Mapping[str, str] | None, key: str) -> str:
    """The display name of a row key: its entry in ``labels``, else the key itself."""
    return (labels or {}).get(key, key)


def field_label(labels: Mapping[str, str] | None, field: str) -> str:
    """The display name of a field: its entry in ``labels``, else the field capitalised."""
    if labels and field in labels:
        return labels[field]
    return field[:1].upper() + field[1:]


def report_labels(methods: Mapping[str, Method]) -> dict[str, str]:
    """The labels the report prints (SPEC §4.5), method spec -> label: each method's own
    label, except that a PPO critic method whose label nobody chose (``label=`` in its spec or
    another label in the results file) is named as in the paper: ``PPO-N``, or ``PPO-N
    (λ=0.95)`` when methods of that mode with several λ are reported. Names two methods would
    share are left as they were."""
    out = {m: method.label for m, method in methods.items()}
    critics = {m: method for m, method in methods.items() if method.critic is not None}
    lams: dict[str, set[float]] = {}
    for method in critics.values():
        lams.setdefault(method.critic["mode"], set()).add(method.critic["lam"])
    renamed = {}
    for m, method in critics.items():
        if method.labelled:
            continue
        several = len(lams[method.critic["mode"]]) > 1
        renamed[m] = method.estimator_label + (f" (λ={lam_text(method.critic['lam'])})" if several else "")
    taken = [out[m] for m in methods if m not in renamed] + list(renamed.values())
    out.update({m: name for m, name in renamed.items() if taken.count(name) == 1})
    return out
