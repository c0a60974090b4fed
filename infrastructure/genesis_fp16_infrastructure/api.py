"""The library's one door for the daemon: every name ``genesis_fp16`` (its commands,
``bench`` and ``probe`` included) imports from the library, it imports from here.

``from genesis_fp16_infrastructure.api import AgentFolder, check_result``: the plugin
contract, the precision vocabulary and decision, the agent's folder, ``run_plugin``, the
probe, the flight recorder's replay and what ``bench`` builds. It hands out names and
objects, never a module: the agent's outbox is ``AgentFolder.outbox``, bench's workload
``Workload`` (``benchmarks/seam_counts.py`` counts a name read through a module object
too). The library's own modules never import this one: each imports a name from the
module that defines it. A plugin imports the contract through the daemon's
``genesis_fp16.plugin_api``, which takes its names from here
(``tests/test_import_paths.py``; ``benchmarks/seam_counts.py`` counts the daemon's imports
of the library).

The imports under ``TYPE_CHECKING`` below are the one list of what this module exports:
a type checker reads them, and ``__getattr__`` reads the same block from this file to
load each name on first use (PEP 562, ``lazy_exports``), so that importing a torch-free name
(``AgentPlugin``, ``Outcome``) does not import torch through ``run_plugin``.
"""

# ruff: noqa: F401  (the imports under TYPE_CHECKING are this module's exports)

from __future__ import annotations

from typing import TYPE_CHECKING

from genesis_fp16_infrastructure.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.agent_folder.files import (
        RUN_FILE,
        SetAside,
        UnusableStateFile,
        on_set_aside,
        write_json_atomic,
    )
    from genesis_fp16_infrastructure.agent_folder.layout import (
        check_agent_name,
        is_agent_name,
        shown_name,
    )
    from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
        JournalEntry,
        Outcome,
        ServedPointer,
    )
    from genesis_fp16_infrastructure.agent_folder.outbox_event import Event
    from genesis_fp16_infrastructure.agent_folder.run_records import (
        LastRun,
        LiveMark,
        RunEntry,
        text,
    )
    from genesis_fp16_infrastructure.checkpoints_folder import CheckpointsFolder
    from genesis_fp16_infrastructure.contract.agent_snapshot import (
        AgentSnapshot,
        AgentState,
        DataCheck,
        read_snapshot,
        resume_loss_scale,
    )
    from genesis_fp16_infrastructure.contract.judging import (
        JUDGING_VERSION,
        JudgedPlugin,
        model_weights,
    )
    from genesis_fp16_infrastructure.contract.plugin_api import (
        API_CHANGES,
        API_VERSION,
        AgentOption,
        AgentPlugin,
        Capabilities,
        ProbeSetup,
        TrainRequestError,
        api_version_error,
        capabilities_of,
        check_result,
        declared_options,
        parse_options,
    )
    from genesis_fp16_infrastructure.contract.record_losses import RecordLosses, RecordLossesError
    from genesis_fp16_infrastructure.contract.reports import (
        GateReport,
        LiveReport,
        ScoresOn,
        TrainResult,
    )
    from genesis_fp16_infrastructure.contract.train_request import DEFAULT_STEPS, TrainRequest
    from genesis_fp16_infrastructure.errors import (
        BundleError,
        CheckpointError,
        DataError,
        LockBusy,
        PrecisionError,
        ProbeError,
        ServedPointerError,
    )
    from genesis_fp16_infrastructure.folder import AgentFolder
    from genesis_fp16_infrastructure.judging.run import run_plugin
    from genesis_fp16_infrastructure.machine_memory import machine_memory_bytes, peak_rss_mib
    from genesis_fp16_infrastructure.precision_names import (
        CHOICES,
        LOW_PRECISIONS,
        PRECISIONS,
        PrecisionName,
        RequestedName,
        precision_name,
    )
    from genesis_fp16_infrastructure.probe.runner import ProbeReport, run_probe
    from genesis_fp16_infrastructure.training.flight.bundle import load_bundle
    from genesis_fp16_infrastructure.training.precision.decide import (
        cpu_capabilities,
        decide,
        planned_precision,
    )
    from genesis_fp16_infrastructure.training.precision.execution_names import (
        EXECUTION_MODES,
        FALLBACK_REASONS,
    )
    from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig
    from genesis_fp16_infrastructure.training.precision.precision_memory import PrecisionMemory
    from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
    from genesis_fp16_infrastructure.training.reports import (
        Calibration,
        ModuleRange,
        TrainingSummary,
    )
    from genesis_fp16_infrastructure.training.run.fit import fit
    from genesis_fp16_infrastructure.training.run.task import (
        FitOptions,
        FitResult,
        TrainingTask,
        to_device,
    )
    from genesis_fp16_infrastructure.world_model.workload import Batch, Workload


__getattr__, __dir__ = lazy_exports(__name__, __file__)
