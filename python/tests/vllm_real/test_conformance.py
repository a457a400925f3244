"""test_conformance.py — KvactConnector against the installed vLLM's KVConnectorBase_V1.

The lists of methods come from the installed vLLM, not from this file: a
vLLM upgrade that adds an abstract method, changes a signature or a return
type shows up here as a new failing case, before a user meets it.

- every abstract method of the real base class is implemented;
- every method of the base that KvactConnector defines (the abstract ones,
  the optional ones it overrides, the constructor) takes the same parameters
  (names, kinds, defaults), is the same kind of attribute (method,
  classmethod, property), and declares the same return type;
- the optional calls issue 27 asks for are overridden.
"""
import inspect
import re

import pytest
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

from kvact.integrations.vllm import KvactConnector

import vllm_cpu  # noqa: F401  (the suite's environment settings, before anything reads them)

ABSTRACT = sorted(KVConnectorBase_V1.__abstractmethods__)
# The base's attributes that KvactConnector defines itself (the constructor included).
OVERRIDDEN = sorted(name for name in vars(KvactConnector)
                    if hasattr(KVConnectorBase_V1, name)
                    and (not name.startswith("_") or name == "__init__"))
CHECKED = sorted(set(ABSTRACT) | set(OVERRIDDEN))
# Optional calls of the base that issue 27 asks KvactConnector to define.
ISSUE_27 = ["build_kv_connector_stats", "get_kv_connector_kv_cache_events",
            "get_kv_connector_stats", "requires_kv_delivery",
            "requires_piecewise_for_cudagraph", "reset_cache", "shutdown", "take_events"]


def _static(cls, name):
    return inspect.getattr_static(cls, name)


def _function(attr):
    """The function behind a method, classmethod, staticmethod or property."""
    if isinstance(attr, (classmethod, staticmethod)):
        return attr.__func__
    if isinstance(attr, property):
        return attr.fget
    return attr


def _params(cls, name):
    sig = inspect.signature(_function(_static(cls, name)))
    return [(p.name, p.kind.name, "-" if p.default is p.empty else repr(p.default))
            for p in sig.parameters.values()]


def _returns(cls, name):
    """The declared return type as text, module prefixes and quotes dropped (the base
    names some types as strings, under TYPE_CHECKING); None when none is declared."""
    ann = inspect.signature(_function(_static(cls, name))).return_annotation
    if ann is inspect.Signature.empty:
        return None
    text = ann if isinstance(ann, str) else inspect.formatannotation(ann)
    text = text.replace("'", "").replace('"', "").replace("typing.", "")
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", text)


def test_kvact_connector_subclasses_the_installed_base():
    assert issubclass(KvactConnector, KVConnectorBase_V1), (
        "kvact.integrations.vllm fell back to its stand-in base: the real one did not import")


def test_the_installed_base_has_abstract_methods():
    """Guards the parametrizations below against an empty list."""
    assert ABSTRACT, "KVConnectorBase_V1 declares no abstract method: was it renamed?"


@pytest.mark.parametrize("name", ABSTRACT)
def test_abstract_method_is_implemented(name):
    assert name not in getattr(KvactConnector, "__abstractmethods__", ()), (
        "KvactConnector leaves %s abstract" % name)
    assert _static(KvactConnector, name) is not _static(KVConnectorBase_V1, name)


@pytest.mark.parametrize("name", CHECKED)
def test_parameters_match_the_base(name):
    ours, theirs = _params(KvactConnector, name), _params(KVConnectorBase_V1, name)
    assert ours == theirs, "%s: kvact %s, vLLM %s" % (name, ours, theirs)


@pytest.mark.parametrize("name", CHECKED)
def test_attribute_kind_matches_the_base(name):
    ours = type(_static(KvactConnector, name)).__name__
    theirs = type(_static(KVConnectorBase_V1, name)).__name__
    assert ours == theirs, "%s: kvact defines a %s, vLLM a %s" % (name, ours, theirs)


@pytest.mark.parametrize("name", CHECKED)
def test_return_type_matches_the_base(name):
    ours, theirs = _returns(KvactConnector, name), _returns(KVConnectorBase_V1, name)
    assert ours == theirs, "%s: kvact declares %s, vLLM %s" % (
        name, ours or "no return type", theirs or "none")


@pytest.mark.parametrize("name", ISSUE_27)
def test_overrides_what_issue_27_asks_for(name):
    assert hasattr(KVConnectorBase_V1, name), "vLLM no longer has %s" % name
    assert name in vars(KvactConnector), "KvactConnector inherits vLLM's default %s" % name
