/* A do-nothing preload for mutations.sh: one symbol, no constructor, no hooks. Loaded in the
 * library's place (DROPBEHIND_TEST_LIB), every check that needs the shim to act must fail. */
int dropbehind_noop_preload = 1;
