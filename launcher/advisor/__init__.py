"""The advisor: pure functions from (machine, model) to fit, speed, and engine + format + quant choice."""

from launcher.advisor.fit import DeviceFit, FitResult, fit_model, kv_cache_bytes, weights_bytes
from launcher.advisor.options import Option
from launcher.advisor.plan import ServePlan, plan_local
from launcher.advisor.recommend import Recommendation, recommend
from launcher.advisor.speed import SpeedEstimate, estimate_speed

__all__ = [
    "DeviceFit",
    "FitResult",
    "Option",
    "Recommendation",
    "ServePlan",
    "SpeedEstimate",
    "estimate_speed",
    "fit_model",
    "kv_cache_bytes",
    "plan_local",
    "recommend",
    "weights_bytes",
]
