"""The figures of a run, shared by the live dashboard page and the HTML report (Bokeh only, no Dask)."""

from __future__ import annotations

from typing import Any

from daskrl.monitor.stats import as_number

# Colours of the time-share activities (components time "waiting", "env", ...; see docs/metrics.md).
ACTIVITY_COLORS = {
    "env": "#2ca02c", "inference": "#1f77b4", "train": "#d62728", "waiting": "#bdbdbd", "params": "#9467bd",
    "publish": "#8c564b", "gather": "#17becf", "scatter": "#bcbd22", "other": "#eeeeee",
}
# Colours of the fps and return curves: distinct from the activities' so a screenshot can tell them apart.
FPS_COLOR, RETURN_COLOR, LAG_COLOR, EVAL_COLOR = "#3949ab", "#00897b", "#8e24aa", "#f4511e"
_SPARE_COLORS = ["#ff7f0e", "#e377c2", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5"]

_SERIES = ["time_s", "env_steps", "fps", "episode_return_mean", "episode_return_std", "policy_lag", "policy_version",
           "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "eval_return_mean",
           "eval_env_steps"]


def series(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Columns for a ColumnDataSource (missing values as NaN, which Bokeh draws as gaps), with the return band."""
    cols = {k: [as_number(r.get(k)) for r in rows] for k in _SERIES}
    pairs = list(zip(cols["episode_return_mean"], cols["episode_return_std"], strict=True))
    cols["return_low"] = [m - s for m, s in pairs]
    cols["return_high"] = [m + s for m, s in pairs]
    return cols


def share_bars(shares: dict[str, dict[str, float]]) -> dict[str, list]:
    """Stacked horizontal bars: one row per component, one segment per activity, "other" for untimed time."""
    cols: dict[str, list] = {"component": [], "activity": [], "left": [], "right": [], "share": [], "color": []}
    spare = iter(_SPARE_COLORS * 4)
    colors = dict(ACTIVITY_COLORS)
    for component in sorted(shares):
        parts = dict(sorted(shares[component].items(), key=lambda kv: (kv[0] == "waiting", kv[0])))
        parts["other"] = max(0.0, 1.0 - sum(parts.values()))
        left = 0.0
        for activity, share in parts.items():
            if activity not in colors:
                colors[activity] = next(spare, "#7f7f7f")
            cols["component"].append(component)
            cols["activity"].append(activity)
            cols["left"].append(left)
            cols["right"].append(left + share)
            cols["share"].append(share)
            cols["color"].append(colors[activity])
            left += share
    return cols


def new_figure(title: str, y_label: str, x_label: str = "seconds", width_mode: str = "stretch_width", x_range=None,
               **options: Any):
    """A time-series figure as every plot of daskrl draws it (the x range shared when given)."""
    from bokeh.plotting import figure

    f = figure(title=title, height=230, sizing_mode=width_mode, x_axis_label=x_label, y_axis_label=y_label,
               tools="pan,wheel_zoom,box_zoom,reset,save", **({"x_range": x_range} if x_range else {}), **options)
    f.toolbar.logo = None
    return f


def add_hover(figures, extra: list[tuple[str, str]] | None = None) -> None:
    """The same tooltips on every time series (env steps, time, the value under the cursor)."""
    from bokeh.models import HoverTool

    for f in figures:
        f.add_tools(HoverTool(tooltips=[*(extra or []), ("env steps", "@env_steps{0,0}"), ("time", "@time_s{0.0} s"),
                                        ("value", "$y{0.000}")], mode="vline"))


def run_figures(source, x: str = "time_s", x_label: str = "seconds", width_mode: str = "stretch_width"):
    """The figures of the run as a whole (frames/s, policy lag), whatever its number of policies."""
    fps = new_figure("Environment frames per second", "frames/s", x_label, width_mode)
    fps.line(x, "fps", source=source, line_width=2, color=FPS_COLOR)
    lag = new_figure("Policy lag (versions between acting and training)", "versions", x_label, width_mode, fps.x_range)
    lag.line(x, "policy_lag", source=source, line_width=2, color=LAG_COLOR)
    add_hover([fps, lag])
    return {"fps": fps, "policy_lag": lag}


def time_figures(source, x: str = "time_s", x_label: str = "seconds", width_mode: str = "stretch_width"):
    """The time-series figures of a one-policy run, shared by the live page and the HTML report (several
    policies: :func:`daskrl.monitor.figures.policy_plots.policy_figures`)."""
    figs = run_figures(source, x, x_label, width_mode)

    def fig(title: str, y_label: str):
        return new_figure(title, y_label, x_label, width_mode, figs["fps"].x_range)

    ret = fig("Episode return (mean ± std of the last 100 episodes)", "return")
    ret.varea(x=x, y1="return_low", y2="return_high", source=source, fill_color=RETURN_COLOR, fill_alpha=0.2)
    ret.line(x, "episode_return_mean", source=source, line_width=2, color=RETURN_COLOR)
    eval_points(ret, x, source)
    loss = fig("Learner losses and policy entropy", "value")
    for key, color in (("loss", "#d62728"), ("policy_loss", "#ff7f0e"), ("value_loss", "#8c564b"),
                       ("entropy", "#e377c2")):
        loss.line(x, key, source=source, line_width=2, color=color, legend_label=key)
    kl = fig("Approximate KL and clip fraction", "value")
    for key, color in (("approx_kl", "#17becf"), ("clip_fraction", "#bcbd22")):
        kl.line(x, key, source=source, line_width=2, color=color, legend_label=key)
    for f in (loss, kl):
        f.legend.location = "top_right"
        f.legend.click_policy = "hide"
    add_hover([ret, loss, kl])
    return {**figs, "return": ret, "losses": loss, "kl": kl}


def eval_points(fig, x: str, source) -> None:
    """Evaluation returns as markers: one per evaluation, so a line between them would hide how few there are."""
    fig.scatter(x, "eval_return_mean", source=source, size=8, color=EVAL_COLOR, legend_label="evaluation")
    fig.legend.location = "bottom_right"


def shares_figure(source, components: list[str], width_mode: str = "stretch_width"):
    from bokeh.models import FactorRange, HoverTool
    from bokeh.plotting import figure

    f = figure(title="Where each component's time goes (share of wall time)", y_range=FactorRange(*components),
               x_range=(0, 1), height=max(230, 90 + 30 * len(components)), sizing_mode=width_mode,
               tools="save", x_axis_label="share of wall time")
    f.toolbar.logo = None
    f.hbar(y="component", left="left", right="right", height=0.7, color="color", line_color="white",
           legend_field="activity", source=source)
    f.add_tools(HoverTool(tooltips=[("component", "@component"), ("activity", "@activity"),
                                    ("share", "@share{0.0%}")]))
    f.legend.orientation = "horizontal"
    f.legend.location = "top_center"
    f.add_layout(f.legend[0], "below")
    return f


