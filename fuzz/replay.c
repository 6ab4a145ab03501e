/* Replays every file of a fuzz corpus directory through LLVMFuzzerTestOneInput, so that the
 * corpus is a regression test in every ordinary build (systemd's habit). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	int n = 0;
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		if (!d) {
			fprintf(stderr, "replay: cannot open corpus %s\n", argv[i]);
			return 1;
		}
		struct dirent *de;
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			char *p = cae__path_join(argv[i], de->d_name);
			char *data = NULL;
			size_t len = 0;
			if (p &&
			    cae__read_file(-100 /* AT_FDCWD */, p, 64u << 20, &data, &len) == 0) {
				LLVMFuzzerTestOneInput((const uint8_t *)data, len);
				n++;
			}
			free(data);
			free(p);
		}
		closedir(d);
	}
	printf("replayed %d inputs\n", n);
	return n > 0 ? 0 : 1;
}
