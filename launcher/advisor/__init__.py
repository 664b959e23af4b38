"""The advisor: functions from (machine, model) to fit, speed, and engine + format + quant choice.

Pure but for one read: speed (and calibrated memory) predictions use the runs `launcher bench
--calibrate` stored for this machine, unless a caller passes `calibration=None`.
"""

from launcher.advisor.calibration import MemoryEstimate, calibrated_memory
from launcher.advisor.calibration_store import predict_memory
from launcher.advisor.fit import DeviceFit, FitResult, fit_model, kv_cache_bytes, weights_bytes
from launcher.advisor.options import Option
from launcher.advisor.plan import ServePlan, plan_for_config, plan_local
from launcher.advisor.recommend import Recommendation, recommend
from launcher.advisor.speed import SpeedEstimate, estimate_speed, predict_speed

__all__ = [
    "DeviceFit",
    "FitResult",
    "MemoryEstimate",
    "Option",
    "Recommendation",
    "ServePlan",
    "SpeedEstimate",
    "calibrated_memory",
    "estimate_speed",
    "fit_model",
    "kv_cache_bytes",
    "plan_for_config",
    "plan_local",
    "predict_memory",
    "predict_speed",
    "recommend",
    "weights_bytes",
]
