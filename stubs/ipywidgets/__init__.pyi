# The part of ipywidgets 8 the workbench uses, typed for mypy: ipywidgets ships no type
# information, so without these every widget is Any and a subclass of one is unchecked.
# Constructors take the widgets' traits as keywords, as ipywidgets does.

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

class Layout:
    display: str | None
    width: str | None
    min_width: str | None
    max_width: str | None
    height: str | None
    max_height: str | None
    flex: str | None
    flex_flow: str | None
    overflow: str | None
    align_items: str | None
    border: str | None
    padding: str | None
    margin: str | None
    def __init__(self, **kwargs: str | None) -> None: ...

class Widget:
    layout: Layout
    def __init__(self, **kwargs: Any) -> None: ...
    def observe(self, handler: Callable[[Mapping[str, Any]], object],
                names: str | Sequence[str] = ..., type: str = ...) -> None: ...
    def unobserve(self, handler: Callable[[Mapping[str, Any]], object],
                  names: str | Sequence[str] = ..., type: str = ...) -> None: ...
    def hold_trait_notifications(self) -> AbstractContextManager[None]: ...
    def close(self) -> None: ...

class DOMWidget(Widget):
    tooltip: str | None
    def add_class(self, className: str) -> DOMWidget: ...
    def remove_class(self, className: str) -> DOMWidget: ...

class Box(DOMWidget):
    children: tuple[Widget, ...]
    def __init__(self, children: Sequence[Widget] = ..., **kwargs: Any) -> None: ...

class VBox(Box): ...
class HBox(Box): ...

class Accordion(Box):
    selected_index: int | None
    titles: tuple[str, ...]
    def set_title(self, index: int, title: str) -> None: ...

class HTML(DOMWidget):
    value: str
    placeholder: str
    description: str
    def __init__(self, value: str = ..., **kwargs: Any) -> None: ...

class Label(DOMWidget):
    value: str
    def __init__(self, value: str = ..., **kwargs: Any) -> None: ...

class Text(DOMWidget):
    value: str
    placeholder: str
    description: str
    disabled: bool
    continuous_update: bool
    def __init__(self, value: str = ..., **kwargs: Any) -> None: ...

class Textarea(Text): ...

class Checkbox(DOMWidget):
    value: bool
    description: str
    disabled: bool
    def __init__(self, value: bool = ..., **kwargs: Any) -> None: ...

class Button(DOMWidget):
    description: str
    disabled: bool
    button_style: str
    icon: str
    def __init__(self, **kwargs: Any) -> None: ...
    def on_click(self, callback: Callable[[Button], object], remove: bool = ...) -> None: ...

class Dropdown(DOMWidget):
    # Options are labels or (label, value) pairs; a value is whatever the pairs hold.
    options: Any
    value: Any
    label: str | None
    index: int | None
    description: str
    disabled: bool
    def __init__(self, **kwargs: Any) -> None: ...

class ToggleButtons(Dropdown): ...

class IntSlider(DOMWidget):
    value: int
    min: int
    max: int
    step: int
    description: str
    disabled: bool
    def __init__(self, value: int = ..., **kwargs: Any) -> None: ...

class IntProgress(DOMWidget):
    value: int
    min: int
    max: int
    description: str
    bar_style: str
    def __init__(self, value: int = ..., **kwargs: Any) -> None: ...

class Output(DOMWidget):
    outputs: tuple[dict[str, Any], ...]
    def __init__(self, **kwargs: Any) -> None: ...
    def clear_output(self, wait: bool = ...) -> None: ...
