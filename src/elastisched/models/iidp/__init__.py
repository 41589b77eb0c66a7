"""IIDP (JABAS §3): one local batch on every GPU, faster GPUs run more virtual workers and accumulate
gradients; its configuration model and the rate rule the simulator prices mixed-type placements with."""
