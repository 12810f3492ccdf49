"""What a block is: a name, a category, a description, a JSON-Schema config, and ``run(ctx, input, config)``.

A block is a class (or any factory) whose instances have these attributes and an async ``run``;
:class:`Block` supplies config checking: :meth:`Block.check_config` refuses a config that names a
tenant (``TENANT_001``), validates it against ``config_schema`` with ``jsonschema`` (``CONFIG_001`` with
the path of the bad field; a missing or empty ``collection`` reports the block's own code, e.g.
``VECTOR_001``) and fills in the schema's defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import BlockConfigError, BlockInputError

if TYPE_CHECKING:
    from .ctx import BlockContext

TENANT_KEY = re.compile(r"^tenant(?:[_-]?(?:id|name|key))?$", re.IGNORECASE)


def field_path(parts: Any, root: str = "config") -> str:
    """``config.a[0].b`` from a jsonschema path."""
    out = root
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def tenant_key(value: Any, path: str = "config") -> str | None:
    """The path of the first key that names a tenant (``tenant``, ``tenant_id``, ``tenantId``, ...), if any."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and TENANT_KEY.match(key):
                return f"{path}.{key}"
            found = tenant_key(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = tenant_key(item, f"{path}[{index}]")
            if found:
                return found
    return None


class Block:
    """The base of bunko's blocks (third-party blocks may use it or just match its attributes)."""

    name: ClassVar[str] = ""
    category: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: The code a missing collection reports (seed: VECTOR_001; rag-query: RAG_002), None if none is read.
    collection_code: ClassVar[str | None] = None

    @property
    def config_schema(self) -> dict[str, Any]:
        """The JSON Schema of the block's config: an object with :meth:`config_properties` and no other field."""
        return {"type": "object", "additionalProperties": False, "properties": self.config_properties()}

    def config_properties(self) -> dict[str, Any]:
        """The fields of the block's config as JSON Schema properties, built when asked (provider enums list
        the providers registered then)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """``{"name", "category", "description", "config_schema"}``: the seed's BLOCK_REGISTRY entry."""
        return describe(self)

    def check_config(self, config: Any) -> dict[str, Any]:
        """``config`` validated against the schema, with defaults filled in (see :func:`check_config`)."""
        return check_config(self, config)

    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        """The block's work: ``input`` (the previous step's output) and ``config`` to its output."""
        raise NotImplementedError


def describe(block: Any) -> dict[str, Any]:
    """The registry entry of any block object."""
    return {"name": block.name, "category": block.category, "description": block.description,
            "config_schema": block.config_schema}


def check_config(block: Any, config: Any) -> dict[str, Any]:
    """``config`` checked for ``block`` (any object with ``config_schema``), defaults filled in.

    Refuses a non-object config and a tenant key (``TENANT_001``), then validates with
    jsonschema; the first error, in document order, is reported with its path (``CONFIG_001``),
    except that a missing or empty collection reports the block's ``collection_code``.
    """
    from jsonschema import Draft202012Validator

    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise BlockConfigError("CONFIG_001", f"config must be an object, got {type(config).__name__}", path="config")
    named = tenant_key(config)
    if named:
        raise BlockConfigError("TENANT_001", f"{named}: a block cannot name a tenant; it always works in the tenant "
                                             "of the run (from the API key or --tenant)", path=named)
    schema = block.config_schema
    errors = sorted(Draft202012Validator(schema).iter_errors(dict(config)),
                    key=lambda e: (list(map(str, e.absolute_path)), e.validator != "required"))
    if errors:
        error = errors[0]
        code = getattr(block, "collection_code", None)
        about_collection = (list(error.absolute_path)[:1] == ["collection"]
                            or (error.validator == "required" and "'collection'" in error.message))
        if code and about_collection:
            raise BlockInputError(code, "config.collection: collection is required (in the config or the input)"
                                  + ("" if error.validator == "required" else f"; {error.message}"),
                                  path="config.collection")
        path = field_path(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            path = field_path([*error.absolute_path, extra[0]]) if extra else path
            message = f"{path}: unknown field; the block takes {', '.join(sorted(schema.get('properties', {})))}"
        else:
            message = f"{path}: {error.message}"
        raise BlockConfigError("CONFIG_001", message, path=path)
    checked = dict(config)
    for key, spec in schema.get("properties", {}).items():
        if key not in checked and isinstance(spec, Mapping) and "default" in spec:
            checked[key] = spec["default"]
    return checked


__all__ = ["Block", "check_config", "describe", "field_path", "tenant_key"]
