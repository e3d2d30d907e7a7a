/* Compiles with a warning (an unused variable) and must still build. */
int warns(void);
int warns(void) {
  int unused;
  return 0;
}
