"""Placing a plot's text labels so that none overlaps another: each label tries the
places it may go, in order, and takes the first that is free."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox

Place = tuple[float, float, Literal["left", "right"], Literal["bottom", "top"]]
"""Where a label may go: its offset from its point in points (x, y), and its horizontal
and vertical alignment there."""

_GAP_PX = 2.0
"""The least room between two labels, in pixels."""


def ladder(dx: float, dy: float, step: float, rungs: int) -> list[Place]:
    """Places beside a point and then ever further above and below it, on both sides:
    ``(dx, dy)`` up and right of it first, each further place ``step`` points on.

    A placed label blocks at most two rungs of a side, so ``rungs`` of twice the labels'
    number leave every label a free place.
    """
    places: list[Place] = []
    for k in range(rungs):
        up, down = dy + k * step, -dy - k * step
        places += [
            (dx, up, "left", "bottom"),
            (dx, down, "left", "top"),
            (-dx, up, "right", "bottom"),
            (-dx, down, "right", "top"),
        ]
    return places


def place_apart(fig: Figure, labels: Sequence[Annotation], places: Sequence[Place]) -> list[Place]:
    """Move each of ``labels`` (annotations placed in offset points), in order, to the
    first of ``places`` where it overlaps no label placed before it and stays inside the
    figure (else the first where it overlaps none; else the first place).

    The figure is laid out first, without the labels, and its layout is then fixed, so
    that saving it keeps the labels where they were put. Returns where each label went.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for label in labels:
        label.set_in_layout(False)
    canvas = FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]  # untyped in matplotlib
    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    placed: list[Bbox] = []
    chosen: list[Place] = []
    for label in labels:
        free: list[Place] = []
        for place in places:
            box = _move(label, place, renderer)
            if any(box.overlaps(other) for other in placed):
                continue
            if fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1):
                free = [place]
                break
            free.append(place)
        chosen.append((free or list(places))[0])
        placed.append(_move(label, chosen[-1], renderer))
    return chosen


def _move(label: Annotation, place: Place, renderer: RendererBase) -> Bbox:
    """Put ``label`` at ``place``; the pixels it then covers, with a gap around them."""
    dx, dy, ha, va = place
    label.xyann = (dx, dy)
    label.set_horizontalalignment(ha)
    label.set_verticalalignment(va)
    return label.get_window_extent(renderer).padded(_GAP_PX)
