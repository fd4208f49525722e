"""The replay functions' keyword-only parameters, in the extension's signatures and in the type
stub, are those of dynosim's settings table, with its defaults: the table is the one place a
setting is defined, and these are the places that cannot be generated from it."""

import ast
import inspect
import pathlib

import pytest

import dynosim
from dynosim import _dynosim

STUB = pathlib.Path(dynosim.__file__).with_name("_dynosim.pyi")
FUNCTIONS = ["run_trace_replay", "run_synthetic_trace_replay"]


def runtime_keywords(name):
    parameters = inspect.signature(getattr(_dynosim, name)).parameters.values()
    return ", ".join(
        f"{p.name}={p.default!r}" for p in parameters if p.kind is p.KEYWORD_ONLY
    )


def stub_keywords(name):
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    function = next(
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name
    )
    arguments = function.args
    return ", ".join(
        f"{arg.arg}={ast.literal_eval(default)!r}"
        for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults)
    )


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_signature_is_the_tables(name):
    table = _dynosim._replay_keywords(name)
    assert "num_workers=1" in table and "replay_mode='offline'" in table, table
    assert runtime_keywords(name) == table


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_stub_is_the_tables(name):
    assert stub_keywords(name) == _dynosim._replay_keywords(name)


def test_an_unknown_function_is_refused():
    with pytest.raises(ValueError, match="no replay function named 'run_nothing'"):
        _dynosim._replay_keywords("run_nothing")
