"""A whole run: the task protocol, ``fit()``, calibration of a measured ``auto``, early
stopping, the precision guard and its snapshots, batches on the device."""
