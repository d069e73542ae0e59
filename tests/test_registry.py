"""ps_toolkit.base.registry: named functions of one kind, the built-in ones kept, unknown names in one line."""

import pytest

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.base.registry import Registry


def built_in(x):
    return x


def make():
    return Registry("widget maker", "--widget", "(x)", {"plain": built_in})


def test_a_registered_function_is_found_by_name_after_the_built_in_ones():
    widgets = make()
    widgets.register("doubled", lambda x: 2 * x)
    assert widgets.names() == ("plain", "doubled") and widgets.built_in == ("plain",)
    assert widgets.get("doubled")(3) == 6 and widgets.get("plain") is built_in
    widgets.unregister("doubled")
    widgets.unregister("plain")  # a built-in one stays
    assert widgets.names() == ("plain",)


def test_an_unknown_name_is_one_line_naming_its_source_and_the_registered_ones():
    widgets = make()
    widgets.register("doubled", lambda x: 2 * x)
    with pytest.raises(ConfigError) as caught:
        widgets.get("tripled")
    assert str(caught.value) == "unknown widget maker 'tripled' (from --widget); registered: plain, doubled"
    with pytest.raises(ConfigError, match=r"\(from WIDGET_ENV\)"):
        widgets.check("tripled", "WIDGET_ENV")


@pytest.mark.parametrize(
    ("name", "function", "message"),
    [
        ("plain", built_in, "widget maker 'plain' is built in; register yours under another name"),
        ("", built_in, "a widget maker needs a name, not ''"),
        ("x", 3, "widget maker 'x' must be a function (x), not 3"),
    ],
)
def test_a_bad_registration_is_refused_and_changes_nothing(name, function, message):
    widgets = make()
    with pytest.raises(ValueError) as caught:
        widgets.register(name, function)
    assert str(caught.value) == message
    assert widgets.names() == ("plain",) and widgets.get("plain") is built_in
