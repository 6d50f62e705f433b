"""stub_api: the API reference from the type stubs and the docstrings.

    .. stub-api:: seqlock_py._seqlock.SeqRecord
       :special-members: __getitem__, __enter__

documents one class (or a module-level function) under the current
module: its signatures, every overload, with the stubs' types (what a type
checker sees), properties as properties and attributes with their types,
in the stubs' order; the text of each entry is the run-time docstring
(what help() shows), else the stub's.  autodoc cannot do this for a C
extension: its methods carry a __text_signature__ without types, and its
getset descriptors look like plain attributes.  A name the stubs declare
but the module lacks is a build warning, so -W fails on a stale stub.
"""

import ast
import copy
import importlib
import inspect
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

# Dunders shown only when a directive asks for them by name.
_HIDDEN = {"__new__", "__init__", "__reduce__", "__class_getitem__"}


def _stub_tree(module):
    """The parsed stub of module: its .pyi beside it, else its source."""
    path = Path(module.__file__)
    stub = path.parent / (module.__name__.rpartition(".")[2] + ".pyi")
    source = stub if stub.is_file() else path
    tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
    return _PrivateAliasesSpelledOut(tree).visit(tree)


class _PrivateAliasesSpelledOut(ast.NodeTransformer):
    """`_Value = Any` is the stub's shorthand, not a name a reader can look
    up: show what it stands for.  Type variables keep their names."""

    def __init__(self, tree):
        self.aliases = {}
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id.startswith("_")
                    and not isinstance(node.value, ast.Call)):
                self.aliases[node.targets[0].id] = node.value

    def visit_Name(self, node):
        return self.aliases.get(node.id, node)


def _decorators(node):
    return {ast.unparse(d) for d in node.decorator_list}


def _parameters(fn, drop_first):
    """fn's parameters as the stub spells them, without self/cls."""
    args = copy.copy(fn.args)
    args.posonlyargs, args.args = list(args.posonlyargs), list(args.args)
    if drop_first:
        (args.posonlyargs or args.args).pop(0)
    return "(" + ast.unparse(args) + ")"


def _signatures(defs, drop_first):
    """One "(params) -> return" per overload (or the one definition)."""
    overloads = [d for d in defs if "overload" in _decorators(d)] or defs[-1:]
    lines = []
    for d in overloads:
        ret = " -> " + ast.unparse(d.returns) if d.returns is not None else ""
        lines.append(_parameters(d, drop_first) + ret)
    return lines


def _doc(runtime, stub_nodes):
    text = inspect.getdoc(runtime) if runtime is not None else None
    if not text:
        for node in stub_nodes:
            text = ast.get_docstring(node)
            if text:
                break
    return text or ""


def _indent(text, by):
    return [(by + line) if line else "" for line in text.splitlines()]


class _Members:
    """A class body of the stub, grouped by name in order of appearance."""

    def __init__(self, body):
        self.order, self.defs, self.attrs = [], {}, {}
        for i, node in enumerate(body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name not in self.defs:
                    self.order.append(node.name)
                    self.defs[node.name] = []
                self.defs[node.name].append(node)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = node.target.id
                following = body[i + 1] if i + 1 < len(body) else None
                doc = (following.value.value if isinstance(following, ast.Expr)
                       and isinstance(following.value, ast.Constant)
                       and isinstance(following.value.value, str) else "")
                self.order.append(name)
                self.attrs[name] = (ast.unparse(node.annotation), doc)


class StubApi(SphinxDirective):
    required_arguments = 1
    option_spec = {"special-members": directives.unchanged}

    def run(self):
        modname, _, name = self.arguments[0].rpartition(".")
        module = importlib.import_module(modname)
        tree = _stub_tree(module)
        found = [n for n in tree.body
                 if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name]
        if not found:
            logger.warning("stub-api: the stubs of %s declare no %s", modname, name,
                           location=self.get_location())
            return []
        runtime = getattr(module, name, None)
        if runtime is None:
            logger.warning("stub-api: %s declares %s, which %s lacks", modname, name, modname,
                           location=self.get_location())
            return []
        special = {s.strip() for s in self.options.get("special-members", "").split(",") if s.strip()}
        if isinstance(found[0], ast.ClassDef):
            lines = self._class(found[0], runtime, special, modname)
        else:
            lines = self._function("py:function", name, found, runtime, "", "")
        node = nodes.container()
        self.state.nested_parse(StringList(lines, self.get_source_info()[0]), self.content_offset, node)
        return node.children

    def _function(self, directive, name, defs, runtime, indent, option, drop_first=False):
        sigs = _signatures(defs, drop_first)
        lines = [f"{indent}.. {directive}:: {name}{sigs[0]}"]
        lines += [f"{indent}   {' ' * len(directive)}   {name}{s}" for s in sigs[1:]]
        if option:
            lines.append(f"{indent}   :{option}:")
        lines.append("")
        lines += _indent(_doc(runtime, defs), indent + "   ")
        lines.append("")
        return lines

    def _class(self, cls_node, cls, special, modname):
        members = _Members(cls_node.body)
        new = members.defs.get("__new__") or members.defs.get("__init__")
        sigs = _signatures(new, drop_first=True) if new else ["()"]
        sigs = [s.partition(" -> ")[0] for s in sigs]
        lines = [f".. py:class:: {cls_node.name}{sigs[0]}"]
        lines += [f"              {cls_node.name}{s}" for s in sigs[1:]]
        lines.append("")
        lines += _indent(_doc(cls, [cls_node]), "   ")
        lines.append("")
        for name in members.order:
            if name.startswith("_") and name not in special:
                continue
            if name in _HIDDEN and name not in special:
                continue
            if not hasattr(cls, name):
                logger.warning("stub-api: the stubs declare %s.%s, which %s lacks",
                               cls_node.name, name, modname, location=self.get_location())
                continue
            runtime = inspect.getattr_static(cls, name)
            if name in members.attrs:
                annotation, stub_doc = members.attrs[name]
                lines += [f"   .. py:attribute:: {name}", f"      :type: {annotation}", ""]
                lines += _indent(inspect.getdoc(runtime) or stub_doc, "      ")
                lines.append("")
                continue
            defs = members.defs[name]
            decorators = _decorators(defs[0])
            if "property" in decorators:
                ret = defs[0].returns
                lines += [f"   .. py:property:: {name}"]
                if ret is not None:
                    lines.append(f"      :type: {ast.unparse(ret)}")
                lines.append("")
                lines += _indent(_doc(runtime, defs), "      ")
                lines.append("")
                continue
            option = ("classmethod" if "classmethod" in decorators
                      else "staticmethod" if "staticmethod" in decorators else "")
            lines += self._function("py:method", name, defs, getattr(cls, name), "   ", option,
                                    drop_first=option != "staticmethod")
        return lines


def setup(app):
    app.add_directive("stub-api", StubApi)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
