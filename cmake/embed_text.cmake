# Writes the bytes of a text file as a NUL-terminated C array, so that the
# library carries a source it compiles at run time.
#   cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed_text.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* Generated from ${IN}; do not edit. */\nextern const char ${NAME}[];\nconst char ${NAME}[] = {${bytes}0};\n")
