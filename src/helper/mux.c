/* Frame headers of the multiplexed helper channel (mux.h). */
#include "helper/mux.h"

#include <errno.h>

#include "base/banned.h"

void cae__mux_header(unsigned char h[CAE_MUX_HEADER], char type, uint32_t id, uint32_t n)
{
	uint32_t len = n + 5;
	for (int i = 0; i < 4; i++) {
		h[i] = (unsigned char)(len >> (8 * i));
		h[5 + i] = (unsigned char)(id >> (8 * i));
	}
	h[4] = (unsigned char)type;
}

int cae__mux_parse_header(const unsigned char h[CAE_MUX_HEADER], char *type, uint32_t *id,
			  uint32_t *payload_len)
{
	uint32_t len = 0, v = 0;
	for (int i = 0; i < 4; i++) {
		len |= (uint32_t)h[i] << (8 * i);
		v |= (uint32_t)h[5 + i] << (8 * i);
	}
	if (len < 5 || len > CAE_MUX_MAX_LENGTH)
		return -EPROTO;
	*type = (char)h[4];
	*id = v;
	*payload_len = len - 5;
	return 0;
}
