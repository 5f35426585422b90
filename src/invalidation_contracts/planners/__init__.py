"""Planners: turn a task, the memory block and earlier feedback into a request."""

from .base import Attempt, Plan, Planner, PlanningContext, Usage

__all__ = ["Attempt", "Plan", "Planner", "PlanningContext", "Usage"]
