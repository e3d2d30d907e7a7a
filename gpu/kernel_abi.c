/* See kernel_abi.h. */
#include "gpu/kernel_abi.h"

const char kernel_abi_traits[] =
    "template <class F> struct __sched_fn;\n"
    "template <class... A> struct __sched_fn<void(A...)> { static const unsigned arity = sizeof...(A); };\n"
    "template <unsigned I, class... A> struct __sched_nth;\n"
    "template <class H, class... T> struct __sched_nth<0, H, T...> { typedef H type; };\n"
    "template <unsigned I, class H, class... T> struct __sched_nth<I, H, T...> {\n"
    "  typedef typename __sched_nth<I - 1, T...>::type type; };\n"
    "template <unsigned I, class F> struct __sched_param;\n"
    "template <unsigned I, class... A> struct __sched_param<I, void(A...)> {\n"
    "  typedef typename __sched_nth<I, A...>::type type; };\n"
    "template <class A, class B> struct __sched_same { static const bool value = false; };\n"
    "template <class A> struct __sched_same<A, A> { static const bool value = true; };\n"
    "template <class T> struct __sched_ptr { static const bool value = false; };\n"
    "template <class T> struct __sched_ptr<T *> { static const bool value = true; };\n"
    "template <class T> struct __sched_ptr<T *const> { static const bool value = true; };\n"
    "template <class T> struct __sched_integral { static const bool value = false; };\n"
    "#define SCHEDRUN_INTEGRAL(T) template <> struct __sched_integral<T> { static const bool value = true; };\n"
    "SCHEDRUN_INTEGRAL(char) SCHEDRUN_INTEGRAL(signed char) SCHEDRUN_INTEGRAL(unsigned char)\n"
    "SCHEDRUN_INTEGRAL(short) SCHEDRUN_INTEGRAL(unsigned short) SCHEDRUN_INTEGRAL(int) SCHEDRUN_INTEGRAL(unsigned int)\n"
    "SCHEDRUN_INTEGRAL(long) SCHEDRUN_INTEGRAL(unsigned long) SCHEDRUN_INTEGRAL(long long)\n"
    "SCHEDRUN_INTEGRAL(unsigned long long)\n"
    "#undef SCHEDRUN_INTEGRAL\n"
    "template <class T, bool S, unsigned N> struct __sched_int {\n"
    "  static const bool value = __sched_integral<T>::value && ((T)-1 < (T)0) == S && sizeof(T) == N; };\n";

static const char *check_of(prog_type t) {
  switch (t) {
  case PT_I32: return "__sched_int<T, true, 4>::value";
  case PT_U32: return "__sched_int<T, false, 4>::value";
  case PT_I64: return "__sched_int<T, true, 8>::value";
  case PT_U64: return "__sched_int<T, false, 8>::value";
  case PT_F32: return "__sched_same<T, float>::value";
  case PT_F64: return "__sched_same<T, double>::value";
  default: return "__sched_ptr<T>::value";
  }
}

void kernel_abi_param_type(strbuf *sb, const gpu_compile_req *r, uint32_t i) {
  sb_addf(sb, "typename __sched_param<%u, decltype(%s)>::type", i, r->entry);
}

void kernel_abi_checks(strbuf *sb, const gpu_compile_req *r) {
  sb_addf(sb,
          "static_assert(__sched_fn<decltype(%s)>::arity == %u, \"kernel '%s': params lists %u "
          "types, but %s takes another number of parameters\");\n",
          r->entry, r->nparams, r->name, r->nparams, r->entry);
  for (uint32_t i = 0; i < r->nparams; i++) {
    sb_addf(sb, "namespace { template <class T> struct __sched_chk_%u { static_assert(%s, \"kernel '%s': "
                "parameter %u is declared %s in params, but %s takes another type there\"); };\n"
                "template struct __sched_chk_%u<",
            i, check_of(r->params[i]), r->name, i + 1, prog_type_name(r->params[i]), r->entry, i);
    kernel_abi_param_type(sb, r, i);
    sb_adds(sb, ">; }\n");
  }
}

void kernel_abi_source(strbuf *sb, const gpu_compile_req *r) {
  sb_adds(sb, kernel_abi_traits);
  sb_addf(sb, "#line %u \"%s\"\n", r->first_line ? r->first_line : 1, r->source_file ? r->source_file : r->name);
  sb_adds(sb, r->source);
  sb_addf(sb, "\n#line 1 \"<entry %s of kernel %s>\"\n", r->entry, r->name);
  kernel_abi_checks(sb, r);
}
