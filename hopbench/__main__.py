from hopbench.cli import main

main()
