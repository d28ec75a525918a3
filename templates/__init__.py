"""Knob spaces: named knobs with candidate values, applied to TVM schedules."""

from autotune.templates.space import Config, InvalidConfig, Knob, KnobSpace, config_from_json, config_to_json

__all__ = ["Config", "InvalidConfig", "Knob", "KnobSpace", "config_from_json", "config_to_json"]
