"""The control plane (docs/control.md): QoS manager, policies, arbiter, controller.

Pure of Spark: the simulator and the tests drive the same objects the running job uses.
Start with ``Controller`` (the loop), ``Policy`` (what to implement for a new policy),
``ControlView`` (what a policy sees) and ``Action`` (what it proposes: one class a kind of
change, ``sluice.control.actions``).
"""

from sluice.control.actions import (
    Action,
    Admission,
    Chains,
    Escalate,
    Executors,
    Partitions,
    Routing,
    SwitchAlternate,
    Threads,
)
from sluice.control.alternates import AlternatesByLoad
from sluice.control.balancing import FluxBalancing, KeyGroupBalancing, RingBalancing
from sluice.control.batch_sizing import FixedAdmission, FixedPointBatchSizing, LinearFit, ModelBatchSizing
from sluice.control.chaining import DynamicChaining
from sluice.control.collocation import CollocationBalancing
from sluice.control.config import build_policies, default_policies, load_policies, register
from sluice.control.controller import Controller, EscalationWarning
from sluice.control.decisions import read_decisions
from sluice.control.guards import Guards
from sluice.control.policy import Policy
from sluice.control.qos import ConstraintStatus, QoSManager, eq1_mean
from sluice.control.scaling import IncrementalScaling, OneStepScaling
from sluice.control.view import ControlView, Resources

__all__ = [
    "Action",
    "Admission",
    "AlternatesByLoad",
    "Chains",
    "CollocationBalancing",
    "ConstraintStatus",
    "ControlView",
    "Controller",
    "DynamicChaining",
    "Escalate",
    "EscalationWarning",
    "Executors",
    "FixedAdmission",
    "FixedPointBatchSizing",
    "FluxBalancing",
    "Guards",
    "IncrementalScaling",
    "KeyGroupBalancing",
    "LinearFit",
    "ModelBatchSizing",
    "OneStepScaling",
    "Partitions",
    "Policy",
    "QoSManager",
    "Resources",
    "RingBalancing",
    "Routing",
    "SwitchAlternate",
    "Threads",
    "build_policies",
    "default_policies",
    "eq1_mean",
    "load_policies",
    "read_decisions",
    "register",
]
