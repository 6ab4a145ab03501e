/* Internal to the jsonrpc module (and its tests): the word-at-a-time test of the encoder.
 * Parsing is jansson's (json_loadb): untrusted input goes to the well-kept parser. */
#ifndef CAE_JSONRPC_INTERNAL_H
#define CAE_JSONRPC_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bytes of w (8 bytes as loaded from memory) that JSON text cannot carry as they are in a
 * string: the top bit of each byte below 0x20, '"', '\\' or from 0x80 (the "has a byte less
 * than" and "has a zero byte" word tricks). 0 when all 8 are plain ASCII. Bits above the
 * lowest one may be spurious; the lowest one is exact. */
static inline uint64_t cae__jsonrpc_special8(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
	uint64_t special = ((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) |
			   ((backslash - ones) & ~backslash) | w;
	return special & high;
}

/* Offset of the byte of the lowest bit set in a non-zero special8 mask, or 0 where the byte
 * order does not allow it (the caller then goes on byte by byte). */
static inline size_t cae__jsonrpc_special8_offset(uint64_t sp)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (size_t)__builtin_ctzll(sp) / 8;
#else
	(void)sp;
	return 0;
#endif
}

#endif
