"""Starting and watching the processes a run trains in: the child handoff, torchrun ranks,
Kubeflow's layout, the devices a run may use and their shared slots."""
