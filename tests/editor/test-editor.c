#include "cae/editor.h"
#include "testutil.h"
START_TEST(dummy)
{
	ck_assert(1);
}
END_TEST
int main(void)
{
	Suite *s = suite_create("editor");
	TCase *tc = tcase_create("x");
	tcase_add_test(tc, dummy);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
