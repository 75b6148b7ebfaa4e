"""A Link drawn: its namespaces as boxes from server to client, joined by their veths.
Plotly is imported when the figure is drawn, not with labkit.netlink: `labkit doctor`
makes links and draws none."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go


def topology(description: list[dict], shaping: str = "") -> go.Figure:
    """A link as boxes, server to client: each namespace (labkit.netlink.Link.describe())
    with its interfaces, addresses and qdiscs, joined by its veth pairs."""
    import plotly.graph_objects as go

    from labkit.plots.style import color

    fig = go.Figure()
    width, gap = 2.6, 1.4
    for i, ns in enumerate(description):
        x0 = i * (width + gap)
        fig.add_shape(type="rect", x0=x0, x1=x0 + width, y0=0, y1=2, line=dict(color=color(ns["role"])),
                      fillcolor="rgba(0,0,0,0.03)")
        lines = [f"<b>{ns['role']}</b>", f"netns {ns['namespace']}"] + [
            f"{it['name']}: {it['address']}" + (f"<br>qdisc {it['qdisc']}" if it["qdisc"] else "")
            for it in ns["interfaces"]]
        fig.add_annotation(x=x0 + width / 2, y=1, text="<br>".join(lines), showarrow=False, font=dict(size=12))
        if i:
            fig.add_shape(type="line", x0=x0 - gap, x1=x0, y0=1, y1=1, line=dict(width=4, color="grey"))
            fig.add_annotation(x=x0 - gap / 2, y=1.15, text="veth", showarrow=False, font=dict(size=11))
    total = len(description) * (width + gap) - gap
    fig.update_xaxes(visible=False, range=[-0.2, total + 0.2])
    fig.update_yaxes(visible=False, range=[-0.2, 2.2])
    fig.update_layout(title=f"The link: {shaping}" if shaping else "The link", height=260, showlegend=False,
                      margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white")
    return fig
