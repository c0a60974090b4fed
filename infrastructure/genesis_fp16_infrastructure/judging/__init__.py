"""The served-model lifecycle for any plugin that declares how to score its records
(contract.judging): one judged run (:mod:`.run`: candidate, gate, verdict, prune's
partner), its live watch (:mod:`.watch`) with its anytime-valid bound
(:mod:`.confidence_sequence`) and its tests per segment and A/A self-test
(:mod:`.segment_tests`), what they
keep in the agent folder (:mod:`.stores`), and the id lookups a process keeps from run to
run so that each costs what is new (:mod:`.id_lookups`). The held-out split it judges on is the
contract's (``contract.split``): a request names it, so the contract holds it."""
