"""Beam's ``apache_beam.io.kafka.ReadFromKafka``/``WriteToKafka`` on sparkbeam's runner.

In Beam they are cross-language transforms: applying one asks a Java expansion service to
expand it. With ``--runner=sparkbeam.SparkRunner`` nothing is expanded: ``SparkRunner.apply``
hands them to ``substitute`` here, which checks their documented arguments as sparkbeam's own
``ReadFromKafka``/``WriteToKafka`` take them (refusing, when the transform is applied, what
Spark's connector cannot do, naming what to use) and leaves a leaf in Beam's graph that
``translate.py`` turns into the same ops as sparkbeam's reads and writes.

Read: ``consumer_config``, ``topics``, ``key_deserializer``/``value_deserializer``
(``ByteArrayDeserializer``, the default, or ``StringDeserializer``), ``timestamp_policy``;
the elements are ``(key, value)`` pairs as Beam's. ``with_metadata=True`` is refused: Beam's
rows (``BeamKafkaRecord``) are not what Spark's source gives; use sparkbeam's
``ReadFromKafka(with_metadata=True)`` in a sparkbeam pipeline. Write: ``producer_config``,
``topic``, ``key_serializer``/``value_serializer`` (``ByteArraySerializer`` or
``StringSerializer``).
"""

from __future__ import annotations

from typing import Any

from apache_beam import pvalue as beam_pvalue
from apache_beam import typehints
from apache_beam.io import kafka as beam_kafka
from apache_beam.transforms.core import Windowing
from apache_beam.transforms.window import GlobalWindows

from sparkbeam.io.kafka import WriteToKafka
from sparkbeam.io.streaming import ReadFromKafka, _RouteBadRecords
from sparkbeam.runners.core.lowering.errors import UnsupportedError

__all__ = ["is_kafka", "read_ops", "substitute", "write_op"]


def is_kafka(transform: Any) -> bool:
    return isinstance(transform, (beam_kafka.ReadFromKafka, beam_kafka.WriteToKafka))


def _arguments(transform: Any) -> dict[str, Any]:
    """The arguments Beam's transform was built with, decoded from the configuration it
    would send the expansion service (a row of Beam's schema)."""
    from apache_beam.coders.row_coder import RowCoder
    from apache_beam.portability.api import external_transforms_pb2

    payload = external_transforms_pb2.ExternalConfigurationPayload.FromString(transform._payload)
    return dict(RowCoder(payload.schema).decode(payload.payload)._asdict())


def _sparkbeam_read(transform: Any, where: str) -> ReadFromKafka:
    arguments = _arguments(transform)
    if transform._urn == beam_kafka.ReadFromKafka.URN_WITH_METADATA:
        msg = (
            f"{where}: ReadFromKafka(with_metadata=True) gives Beam's BeamKafkaRecord rows, which Spark's Kafka "
            "source does not make; read with sparkbeam.io.ReadFromKafka(with_metadata=True) in a sparkbeam pipeline, "
            "or without with_metadata here"
        )
        raise UnsupportedError(msg)
    for name in ("consumer_factory_fn_class", "consumer_factory_fn_params"):
        if arguments.pop(name, None) is not None:
            msg = f"{where}: ReadFromKafka({name}=...) names a Java consumer factory, which Spark's Kafka source cannot use"
            raise UnsupportedError(msg)
    try:
        return ReadFromKafka(
            dict(arguments.pop("consumer_config")),
            list(arguments.pop("topics")),
            arguments.pop("key_deserializer"),
            arguments.pop("value_deserializer"),
            timestamp_policy=arguments.pop("timestamp_policy"),
            **arguments,
        )
    except (TypeError, ValueError) as error:
        msg = f"{where}: Beam's {error}"
        raise UnsupportedError(msg) from None


def _sparkbeam_write(transform: Any, where: str) -> WriteToKafka:
    arguments = _arguments(transform)
    if arguments.pop("with_headers", False):
        msg = f"{where}: WriteToKafka(with_headers=True) writes Beam rows with headers; write (key, value) pairs"
        raise UnsupportedError(msg)
    try:
        return WriteToKafka(**arguments)
    except (TypeError, ValueError) as error:
        msg = f"{where}: Beam's {error}"
        raise UnsupportedError(msg) from None


def substitute(transform: Any, pvalueish: Any, where: str) -> Any:
    """What applying Beam's Kafka ``transform`` gives on sparkbeam (checked now, see module docs)."""
    pipeline = pvalueish.pipeline
    if isinstance(transform, beam_kafka.ReadFromKafka):
        read = _sparkbeam_read(transform, where)
        key = typehints.Optional[bytes] if read.decode is None else typehints.Any
        value = bytes if read.decode is None else typehints.Any
        # a root of Beam's graph: its windowing is said here (Beam would ask the transform's input)
        windowing = Windowing(GlobalWindows())
        return beam_pvalue.PCollection(pipeline, element_type=typehints.KV[key, value], windowing=windowing, is_bounded=False)
    _sparkbeam_write(transform, where)
    return beam_pvalue.PDone(pipeline)


def read_ops(node: Any, base: dict[str, Any], records_id: int) -> tuple[Any, Any]:
    """A read's two ops: the stream read into ``records_id``, then bad records refused
    (Beam's reader fails on a record it cannot deserialise, as this does)."""
    from sparkbeam.runners.core.lowering.ops import ParDoOp, StreamReadOp

    where = f"'{base['label']}' (applied at {base['location']})"
    read = _sparkbeam_read(node.transform, where)
    spec = read.spec()
    source = StreamReadOp(label=f"{base['label']}/Read", location=base["location"], inputs=(), outputs=(records_id,), spec=spec)
    route = ParDoOp(
        label=base["label"], location=base["location"], inputs=(records_id,), outputs=base["outputs"],
        dofn=_RouteBadRecords(f"ReadFromKafka '{base['label']}'", None), args=(), kwargs={}, output_tags=(None,),
    )
    return source, route


def write_op(base: dict[str, Any], node: Any) -> Any:
    """Beam's WriteToKafka, left unexpanded by ``SparkRunner.apply``: sparkbeam's sink op."""
    from sparkbeam.runners.core.lowering.ops import WriteKafkaOp

    where = f"'{node.full_label}' (applied at {base['location']})"
    return WriteKafkaOp(**base, spec=_sparkbeam_write(node.transform, where).spec)
