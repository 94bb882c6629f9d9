from .main import program

program()
