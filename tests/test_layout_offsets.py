"""The shared layout, pinned: every offset the co-tenant tests write at
(record_helpers.HEADER_OFFSETS, the fuzz test's WORDS, the scribbler
storm's skips) is the offset the C core compiles, and the count readers
load has its cache line to itself.  A change of layout fails here until
the tables and the layout version move with it."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

import fuzz_record
import record_helpers
import scribbler_storm
from seqlock_py import SeqRecord, SeqRing

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "src" / "libseqlock"
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = [
    pytest.mark.skipif(CC is None, reason="no C compiler"),
    pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or platform.machine() != "x86_64",
                       reason="the tables are glibc's pthread_mutex_t on x86-64"),
]

# name -> C expression of its offset in a record (h: a record_header *)
C_OFFSETS = {
    "magic": "offsetof(record_header, magic)",
    "version": "offsetof(record_header, version)",
    "data_bytes": "offsetof(record_header, data_bytes)",
    "layout_bytes": "offsetof(record_header, layout_bytes)",
    "lock_abi": "offsetof(record_header, lock_abi)",
    "recoveries": "offsetof(record_header, recoveries)",
    "sequence": "offsetof(record_header, lock.seqcount)",
    "wake_from": "offsetof(record_header, lock.wake_from)",
    "holder": "offsetof(record_header, lock.holder)",
    "starving": "offsetof(record_header, lock.starving)",
    "gaps": "offsetof(record_header, lock.gaps)",
    "ready": "offsetof(record_header, lock.ready)",
    "abandoned": "offsetof(record_header, lock.abandoned)",
    "beacon_lock": "offsetof(record_header, lock.beacon.__data.__lock)",
    "beacon_count": "offsetof(record_header, lock.beacon.__data.__count)",
    "beacon_owner": "offsetof(record_header, lock.beacon.__data.__owner)",
    "beacon_nusers": "offsetof(record_header, lock.beacon.__data.__nusers)",
    "beacon_kind": "offsetof(record_header, lock.beacon.__data.__kind)",
    "beacon_spins": "offsetof(record_header, lock.beacon.__data.__spins)",
    "beacon_list_prev": "offsetof(record_header, lock.beacon.__data.__list.__prev)",
    "beacon_list_next": "offsetof(record_header, lock.beacon.__data.__list.__next)",
    "owner_token": "offsetof(record_header, lock.owner.token)",
    "owner_pid_ns": "offsetof(record_header, lock.owner.pid_ns)",
    "owner_started": "offsetof(record_header, lock.owner.started)",
    "owner_tid": "offsetof(record_header, lock.owner.tid)",
    "header_size": "RECORD_HEADER_SIZE",
    "ring_header_size": "RING_HEADER_SIZE",
    "line": "SEQLOCK_LINE",
    "record_version": "RECORD_VERSION",
    "ring_version": "RING_VERSION",
    "beacon_end": "offsetof(record_header, lock.owner)",
}
# Record and ring geometries whose offsets the core computes: (layout
# bytes, data bytes) and, for rings, a capacity.
GEOMETRIES = [(4, 8), (5, 40), (19, 40), (64, 1), (65, 8000), (200, 129)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """{name: value} as the C core computes them."""
    lines = [f'    printf("%s %zu\\n", "{n}", (size_t)({e}));' for n, e in C_OFFSETS.items()]
    for lb, db in GEOMETRIES:
        lines.append(f'    printf("copies {lb} {db} %zu %zu %zu\\n", record_data_offset({lb}),'
                     f' record_copy_stride({db}) * SEQLOCK_WORD_SIZE, record_size({lb}, {db}));')
        lines.append(f'    printf("ring {lb} {db} %zu %zu %zu\\n", ring_head_offset({lb}),'
                     f' ring_slots_offset({lb}), ring_size({lb}, {db}, 3));')
    program = ("#define _GNU_SOURCE\n#include <stdio.h>\n#include \"record.h\"\n#include \"ring.h\"\n"
               "int main(void)\n{\n" + "\n".join(lines) + "\n    return 0;\n}\n")
    work = tmp_path_factory.mktemp("offsets")
    (work / "offsets.c").write_text(program)
    built = subprocess.run([CC, "-std=c11", f"-I{CORE}", "-o", str(work / "offsets"),
                            str(work / "offsets.c"), "-lpthread"],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    out = subprocess.run([str(work / "offsets")], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    values, geometry = {}, {}
    for line in out.splitlines():
        words = line.split()
        if words[0] in ("copies", "ring"):
            geometry[(words[0], int(words[1]), int(words[2]))] = tuple(map(int, words[3:]))
        else:
            values[words[0]] = int(words[1])
    return values, geometry


def test_the_co_tenant_tests_header_offsets_are_the_cores(compiled):
    values, _ = compiled
    assert {name: offset for name, (offset, _) in record_helpers.HEADER_OFFSETS.items()} == {
        name: values[name] for name in record_helpers.HEADER_OFFSETS}
    assert record_helpers.LAYOUT_TEXT_OFFSET == values["header_size"] == values["ring_header_size"]
    assert record_helpers.COPY_LINE == values["line"]
    assert (record_helpers.RECORD_VERSION, record_helpers.RING_VERSION) == (
        values["record_version"], values["ring_version"])


def test_the_fuzz_tests_words_are_the_cores(compiled):
    values, _ = compiled
    renamed = {name.replace(".", "_"): offset for name, (offset, _, _) in fuzz_record.WORDS.items()}
    for name, offset in renamed.items():
        if name in values:
            assert offset == values[name], name
    assert fuzz_record.HEADER_SIZE == values["header_size"]
    assert fuzz_record.BEACON == (values["beacon_lock"], values["beacon_end"])
    assert fuzz_record.COPY_LINE == values["line"]


def test_the_scribbler_storms_skips_are_the_beacons_words(compiled):
    values, _ = compiled
    assert scribbler_storm.SKIPS["nobeacon"] == ((values["beacon_lock"], values["beacon_end"]),)
    assert scribbler_storm.SKIPS["trusted"] == (
        (values["beacon_kind"], values["beacon_kind"] + 4),
        (values["beacon_list_prev"], values["beacon_end"]))


@pytest.mark.parametrize("lb, db", GEOMETRIES)
def test_the_tests_copy_offsets_are_the_cores(compiled, lb, db):
    _, geometry = compiled
    data_offset, stride, _ = geometry[("copies", lb, db)]
    header = bytearray(64)
    record_helpers.poke(header, "layout_bytes", lb)
    record_helpers.poke(header, "data_bytes", db)
    assert record_helpers.copy_offsets(header) == (data_offset, data_offset + stride)


def test_the_fuzz_tests_geometry_is_the_cores(compiled):
    _, geometry = compiled
    data_offset, stride, size = geometry[("copies", 5, 40)]  # "a:40B"
    assert fuzz_record.geometry({"a": "40B"}) == (5, 40, data_offset, data_offset + stride, size)


def test_a_records_size_is_the_cores(compiled):
    _, geometry = compiled
    # "x:d;y:d;z:d;u:d;v:d": 19 bytes of layout text, 40 of data
    assert SeqRecord.buffer_size(x="d", y="d", z="d", u="d", v="d") == geometry[("copies", 19, 40)][2]


def test_a_rings_size_is_the_cores(compiled):
    _, geometry = compiled
    # "a:8B": 4 bytes of layout text, 8 of entry
    assert SeqRing.buffer_size(3, a="8B") == geometry[("ring", 4, 8)][2]


def test_the_count_readers_load_shares_no_line_with_a_word_writers_write(compiled):
    values, _ = compiled
    line = values["line"]
    count = values["sequence"]
    written_by_writers = ("holder", "starving", "gaps", "ready", "abandoned", "beacon_lock",
                          "beacon_count", "beacon_owner", "beacon_list_prev", "beacon_list_next",
                          "owner_token", "owner_pid_ns", "owner_started", "owner_tid")
    assert all(values[w] - count >= line for w in written_by_writers)
    assert values["wake_from"] - count < line  # read by the section's end with the count


@pytest.mark.parametrize("lb, db", GEOMETRIES)
def test_each_copy_starts_a_line_of_its_own(compiled, lb, db):
    _, geometry = compiled
    data_offset, stride, size = geometry[("copies", lb, db)]
    line = compiled[0]["line"]
    assert data_offset % line == 0 and stride % line == 0 and stride >= db
    assert data_offset >= compiled[0]["header_size"] + lb
    assert size == data_offset + 2 * stride


@pytest.mark.parametrize("lb, db", GEOMETRIES)
def test_a_rings_head_has_a_line_of_its_own(compiled, lb, db):
    values, geometry = compiled
    head, slots, size = geometry[("ring", lb, db)]
    line = values["line"]
    assert head % line == 0 and slots - head == line
    assert head >= values["ring_header_size"] + lb
    assert size == slots + 3 * 8 * (1 + -(-db // 8))
