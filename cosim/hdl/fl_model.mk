# Read after Verilator's Vtop.mk for a model build (cosim/build.py, SLOW_UNITY_MAKE_ARGS, which
# also empties VM_CLASSES_SLOW and VM_SUPPORT_SLOW on make's command line).
#
# Verilator compiles the model's start-up code (constructors, initial blocks, the settle pass: its
# "slow" files) one file at a time at -O0, each with a precompiled header built for them alone.
# Building that header costs more than parsing it once: here the slow files are compiled as one
# translation unit, Vtop__fl_slow.cpp (written by cosim/build.py from Vtop_classes.mk), with
# the same flags, and archived with the rest of the model.
Vtop__ALL.a: Vtop__fl_slow.o

Vtop__fl_slow.o: Vtop__fl_slow.cpp
	$(OBJCACHE) $(CXX) $(OPT_SLOW) $(CXXFLAGS) $(CPPFLAGS) -c -o $@ $<
