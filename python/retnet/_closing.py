"""Model as a context manager: after close() (or the end of its `with` block) every method and
property but close, closed and repr raises retnet.Error, checked here so no binding forgets it."""
import functools

from ._retnet import Error, Model

_OPEN_ALWAYS = {"close", "closed"}


def _require_open(model):
    if model.closed:
        raise Error("this Model is closed (Model.close() or the end of its `with` block): "
                    "load it again to use it")


def _guard_method(function):
    @functools.wraps(function)
    def method(self, *args, **kwargs):
        _require_open(self)
        return function(self, *args, **kwargs)
    return method


def _guard_property(prop):
    def get(self):
        _require_open(self)
        return prop.fget(self)
    return property(get, doc=prop.__doc__)


def _enter(self):
    _require_open(self)
    return self


def _exit(self, *exc):
    self.close()
    return False


def install():
    """Guards Model's public members; called once the Python-side methods are added."""
    for name, member in list(vars(Model).items()):
        if name.startswith("__") or name in _OPEN_ALWAYS:
            continue
        if isinstance(member, property):
            setattr(Model, name, _guard_property(member))
        elif callable(getattr(Model, name)):
            setattr(Model, name, _guard_method(getattr(Model, name)))
    Model.__enter__ = _enter
    Model.__exit__ = _exit
