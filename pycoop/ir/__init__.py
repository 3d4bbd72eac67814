"""The typed SSA IR with structured control flow: data structures, builder, printer, verifier."""
from .core import Block, Function, Module, Op, Value, walk_block
from .printer import print_module
from .verifier import verify

__all__ = ["Block", "Function", "Module", "Op", "Value", "walk_block", "print_module", "verify"]
