"""Private pieces of :mod:`reliacal.training`: optimisers and schedules, state and
checkpoints, validation. Import the public names from :mod:`reliacal.training`."""
