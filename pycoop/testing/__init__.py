"""Differential testing of pycoop: random kernels run on the emulator and on Vulkan."""
