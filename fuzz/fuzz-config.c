/* Fuzz target: arbitrary bytes as a config.yaml document. Must never crash, leak or hang;
 * a loaded config must serialise to JSON that loads again to the same config. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cae/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char *const no_env[] = {(char *)"HOME=/home/fuzz", NULL};
	cae_config *cfg = NULL;
	cae_error err = {0};
	int r = cae_config_load_string(&cfg, (const char *)data, size, "fuzz.yaml", no_env, &err);
	if (r < 0) {
		if (cfg || err.code != r || !memchr(err.message, '\0', sizeof(err.message)))
			abort();
		return 0;
	}
	json_t *j = cae_config_to_json(cfg, false);
	json_t *red = cae_config_to_json(cfg, true);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (text) {
		cae_config *again = NULL;
		if (cae_config_load_string(&again, text, strlen(text), "again.yaml", no_env, &err) <
		    0)
			abort(); /* what we print must load */
		json_t *j2 = cae_config_to_json(again, false);
		if (!json_equal(j, j2))
			abort();
		json_decref(j2);
		cae_config_free(again);
	}
	free(text);
	json_decref(red);
	json_decref(j);
	cae_config_free(cfg);
	return 0;
}
