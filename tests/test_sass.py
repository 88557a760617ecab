"""tunetable.sass on real cuobjdump listings (tests/fixtures/sass/): the k-loop found and counted, bad input named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunetable.sass import SassError, dump_sass, innermost_loops, loop_stats, opcode, parse_listing

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sass"
OPCODES = ("HGMMA", "R2UR", "SYNCS")


def kloops(name: str) -> list[list[str]]:
    """The innermost HGMMA loops of one fixture listing."""
    listing = parse_listing(sass=(FIXTURES / name).read_text(encoding="utf-8"))
    return innermost_loops(listing=listing, issuing="HGMMA")


def test_the_v16_k_loop_is_38_instructions_with_no_r2ur() -> None:
    # Counted by hand in the fixture: head /*1190*/, back-branch /*13e0*/ -> (0x13e0 - 0x1190) / 16 + 1 = 38.
    (body,) = kloops("gemm_wgmma_kloop_uniform_desc.sass")
    stats = loop_stats(body=body, opcodes=OPCODES)
    assert (stats.instructions, stats.count("HGMMA"), stats.count("R2UR"), stats.count("SYNCS")) == (38, 4, 0, 2)
    assert body[0] == "ULEA UR7, UR5, UR16, 0x3" and body[-1] == "BRA 0x1190"


def test_the_k_loop_before_v16_moves_every_descriptor_with_r2ur() -> None:
    # Head /*1080*/, back-branch /*1550*/ -> 78 instructions; eight R2UR lines, two per HGMMA.
    (body,) = kloops("gemm_wgmma_kloop_vector_desc.sass")
    stats = loop_stats(body=body, opcodes=OPCODES)
    assert (stats.instructions, stats.count("HGMMA"), stats.count("R2UR")) == (78, 4, 8)


def test_predicates_are_dropped_and_opcodes_are_the_mnemonic() -> None:
    sass = ("  /*13c0*/      @!P0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R4+URZ+0x30030], RZ ;\n"
            "  /*13d0*/           HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;\n")
    listing = parse_listing(sass=sass)
    assert listing == [(0x13C0, "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R4+URZ+0x30030], RZ"),
                       (0x13D0, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], R24, gsb0")]
    assert [opcode(text) for _, text in listing] == ["SYNCS", "HGMMA"]


def test_an_outer_loop_around_the_k_loop_is_not_counted() -> None:
    # The tile loop closes after the k-loop: only the k-loop is innermost.
    text = (FIXTURES / "gemm_wgmma_kloop_uniform_desc.sass").read_text(encoding="utf-8")
    text += "        /*4000*/                   BRA 0x1160 ;\n"
    listing = parse_listing(sass=text)
    (body,) = innermost_loops(listing=listing, issuing="HGMMA")
    assert len(body) == 38
    assert innermost_loops(listing=listing, issuing="HMMA") == []


def test_a_file_that_is_not_a_cubin_is_named(tmp_path: Path) -> None:
    # A real cuobjdump is not needed to see the error path: a tool that prints nothing stands in for one.
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\necho 'cuobjdump fatal   : not a cubin' >&2\nexit 1\n")
    tool.chmod(0o755)
    cubin = tmp_path / "broken.cubin"
    cubin.write_bytes(b"not an ELF")
    with pytest.raises(SassError, match=rf"^{cubin}: cuobjdump listed no SASS: cuobjdump fatal   : not a cubin$"):
        dump_sass(cubin=cubin, tool=tool)
