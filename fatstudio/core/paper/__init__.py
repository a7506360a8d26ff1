"""The paper itself: the float64 reference, the pseudocode traced line by line, the check against it, the deviations."""
