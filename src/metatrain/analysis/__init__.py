"""Runs as DataFrames and plots, for notebooks and scripts."""

from metatrain.analysis.runs import RunData, load_run, plot_reward_breakdown, plot_training, runs_table

__all__ = ["RunData", "load_run", "plot_reward_breakdown", "plot_training", "runs_table"]
