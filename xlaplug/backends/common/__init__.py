"""Device-neutral backend pieces that CPU and CUDA both use: errors, structural kernels
(registered for every device), the scalar op table and its code generator, what a loop
fusion may contain, and plans (plain data) that both devices' kernels consume."""
