"""The type stubs (``dynosim/_dynosim.pyi``) describe what the extension really provides, and
the packages are marked typed (``py.typed``), so editors and type checkers see the classes."""

import ast
import importlib
import inspect
import pathlib

import pytest

import dynosim
from dynosim import _dynosim

STUB = pathlib.Path(dynosim.__file__).with_name("_dynosim.pyi")
CLASSES = [
    "MockEngineArgs", "KvRouterConfig", "AicPerfConfig", "SglangArgs", "TrtllmArgs",
    "ReasoningConfig",
]


def stub_tree():
    return ast.parse(STUB.read_text(encoding="utf-8"))


def stub_class(name):
    for node in stub_tree().body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"{name} is not in {STUB}")


def stub_members(name):
    """(every member name, names with a property setter) of a stub class."""
    members, setters = set(), set()
    for node in stub_class(name).body:
        if isinstance(node, ast.FunctionDef):
            members.add(node.name)
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Attribute) and decorator.attr == "setter":
                    setters.add(node.name)
    return members, setters


def stub_parameters(function):
    arguments = function.args
    return [arg.arg for arg in arguments.args + arguments.kwonlyargs if arg.arg != "self"]


@pytest.mark.parametrize("name", CLASSES)
def test_every_public_member_is_in_the_stub(name):
    runtime = getattr(_dynosim, name)
    public = {member for member in dir(runtime) if not member.startswith("_")}
    members, _ = stub_members(name)
    assert public <= members, f"missing from the stub: {sorted(public - members)}"
    assert members - {"__init__", "__copy__", "__deepcopy__"} <= public | {"__init__"}, (
        f"in the stub but not at run time: {sorted(members - public)}"
    )


@pytest.mark.parametrize("name", ["MockEngineArgs", "KvRouterConfig"])
def test_stub_setters_are_the_writable_properties(name):
    runtime = getattr(_dynosim, name)
    writable = {
        member
        for member, value in inspect.getmembers(runtime)
        if inspect.isdatadescriptor(value) and not member.startswith("_")
    }
    _, setters = stub_members(name)
    instance = runtime()
    for member in writable:
        current = getattr(instance, member)
        try:
            setattr(instance, member, current)
            settable = True
        except AttributeError:
            settable = False
        assert settable == (member in setters), member


def test_stub_constructors_match_the_runtime_keywords():
    from test_config_objects import REFERENCE_ENGINE_KEYWORDS

    init = next(
        node
        for node in stub_class("MockEngineArgs").body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    assert stub_parameters(init) == REFERENCE_ENGINE_KEYWORDS
    for keyword in stub_parameters(init):
        with pytest.raises(TypeError, match="unexpected keyword"):
            _dynosim.MockEngineArgs(**{keyword + "_not_a_keyword": None})


def test_stub_functions_match_the_runtime_signatures():
    for function in stub_tree().body:
        if isinstance(function, ast.FunctionDef):
            runtime = getattr(_dynosim, function.name)
            runtime_parameters = list(inspect.signature(runtime).parameters)
            assert stub_parameters(function) == runtime_parameters, function.name


@pytest.mark.parametrize("name", ["run_trace_replay", "run_synthetic_trace_replay"])
def test_replay_functions_take_every_keyword_of_their_signature_and_no_other(name, tmp_path):
    runtime = getattr(_dynosim, name)
    parameters = inspect.signature(runtime).parameters.values()
    keywords = {p.name: None for p in parameters if p.kind is p.KEYWORD_ONLY}
    assert len(keywords) > 20, keywords
    if name == "run_trace_replay":
        trace = tmp_path / "trace.jsonl"
        trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n')
        positional = [str(trace)]
    else:
        positional = [10, 2, 3]
        keywords["replay_concurrency"] = 1  # a generated workload needs an arrival rule
    # None is every other keyword's default: a call naming them all is an ordinary replay.
    report = runtime(*positional, **keywords)
    assert report["completed_requests"] >= 1
    with pytest.raises(TypeError, match=f"^{name}\\(\\) got an unexpected keyword argument 'bogus'$"):
        runtime(*positional, **keywords, bogus=None)


@pytest.mark.parametrize("package", ["dynosim", "dynamo.replay", "dynamo.mocker", "dynamo.llm"])
def test_packages_are_marked_typed(package):
    module = importlib.import_module(package)
    assert (pathlib.Path(module.__file__).parent / "py.typed").is_file()


TYPED_USER_SCRIPT = '''
from dynamo.llm import KvRouterConfig
from dynamo.mocker import MockEngineArgs, SglangArgs
from dynamo.replay import run_synthetic_trace_replay
from dynamo.replay.reporting import format_report_table, write_report_json

engine = MockEngineArgs(engine_type="sglang", sglang=SglangArgs(page_size=16))
engine.num_gpu_blocks = 100
blocks: int = engine.num_gpu_blocks
router = KvRouterConfig.from_json("{}").with_overrides(prefill_load_scale=2.0)
report = run_synthetic_trace_replay(
    100, 10, 5, extra_engine_args=engine, router_config=router, replay_concurrency=1
)
table: str = format_report_table(report)
path = write_report_json(report, None)
'''

MISTYPED_USER_SCRIPT = '''
from dynamo.mocker import MockEngineArgs
engine = MockEngineArgs(num_gpu_blocks="many")
engine.block_size = 5
'''


def test_a_type_checker_sees_the_classes(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is not installed")
    good = tmp_path / "good.py"
    good.write_text(TYPED_USER_SCRIPT)
    cache = ["--no-incremental", "--cache-dir", str(tmp_path / "mypy-cache")]
    out, err, status = api.run(["--strict", *cache, str(good)])
    assert status == 0, out + err
    bad = tmp_path / "bad.py"
    bad.write_text(MISTYPED_USER_SCRIPT)
    out, err, status = api.run([*cache, str(bad)])
    assert status == 1
    assert 'Argument "num_gpu_blocks" to "MockEngineArgs" has incompatible type "str"' in out
    assert 'Property "block_size" defined in "MockEngineArgs" is read-only' in out
