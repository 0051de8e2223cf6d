"""Static memory planning for buffer lifetimes: CNTK-style sharing groups, offset plans, and the
dynamic-allocation lower bound both are judged against."""
from onnxcomp.planner.buffers import Buffer, live_bytes, lower_bound
from onnxcomp.planner.offsets import STRATEGIES, OffsetPlan, offset_plan
from onnxcomp.planner.report import PlannerReport, plan_all, validate
from onnxcomp.planner.sharing import SharingPlan, cntk_plan

__all__ = [
    "STRATEGIES",
    "Buffer",
    "OffsetPlan",
    "PlannerReport",
    "SharingPlan",
    "cntk_plan",
    "live_bytes",
    "lower_bound",
    "offset_plan",
    "plan_all",
    "validate",
]
